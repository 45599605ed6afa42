"""The zygote's request loop, driven directly over its control socket, as kenneld does (see
kernels/python/kennel_zygote.py for the messages), with requests kenneld never sends.

Once the page hint is settled and a request's kernel paths were prepared, a loop in C serves
spawn requests (zygote.c's serve) and hands anything else back to the Python loop: these
tests check that each kind of request gets the answer the Python loop gives, with its
ticket, and that the C loop takes over and hands back when it should. The workspace given
is a plain directory fd, so every session's init fails at its sandbox entry (it reports
that on the session pipe, which nobody reads here) and exits: the zygote's part, the clone
and the answer, is what is tested. The inits are this process's children (the zygote
clones them as its siblings): each is reaped. Needs root, as the zygote does."""

import json
import os
import signal
import socket
import subprocess

import pytest

from .kenneld_proc import ROOT

PY = os.environ.get("KENNEL_PYTHON", "/usr/bin/python3")
# spawner.c's s_boot: the zygote's first lines.
BOOT = ("import json,socket,sys\n"
        "s=socket.socket(fileno=3)\n"
        "m,f,_,_=socket.recv_fds(s,65536,4)\n"
        "c=json.loads(m)\n"
        "sys.path[:0]=c['path']\n"
        "import kennel_zygote\n"
        "kennel_zygote.main(s,c,f)\n")
ENV = {"HOME": "/workspace", "IPYTHONDIR": "/workspace/.ipython"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the zygote needs root")


class Zygote:
    def __init__(self, tmp_path):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(60)
        self.life_r, self.life_w = os.pipe()
        self.proc = subprocess.Popen(
            [PY, "-I", "-c", BOOT], pass_fds=[3, theirs.fileno()], cwd="/",
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            preexec_fn=lambda: os.dup2(theirs.fileno(), 3))
        theirs.close()
        init = os.open(ROOT / "bin" / "kennel-init", os.O_PATH)
        cache = tmp_path / "zygote"
        cache.mkdir()
        config = {"op": "config", "path": [str(ROOT / "kernels" / "python"),
                                           str(ROOT / "build" / "zygote")],
                  "kernel_dir": str(ROOT / "kernels" / "python"), "preload": [],
                  "env": {"MPLCONFIGDIR": str(cache), "IPYTHONDIR": str(cache / "ipython")},
                  "merge_pages": False}
        socket.send_fds(self.sock, [json.dumps(config).encode()], [self.life_r, init])
        os.close(init)
        self.inits = []
        ready = self.recv()
        assert ready["op"] == "ready", ready

    def recv(self):
        return json.loads(self.sock.recv(65536))

    def ask(self, request, nfds=2, raw=None):
        """Send one request with nfds fds (a session pipe, a workspace: a plain directory);
        its answer, once a session it made has exited and is reaped."""
        mine, pipe = socket.socketpair()
        work = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)
        fds = [pipe.fileno(), work][:nfds]
        data = raw if raw is not None else json.dumps(request).encode()
        try:
            socket.send_fds(self.sock, [data], fds)
            answer = self.recv()
        finally:
            pipe.close()
            os.close(work)
            mine.close()  # a session that got further would see kenneld gone, and end
        if answer.get("op") == "spawned":
            os.waitpid(answer["pid"], 0)  # its init failed at the sandbox, as it should here
        return answer

    def close(self):
        self.sock.close()  # the zygote's cue to exit
        try:
            self.proc.wait(timeout=20)
        finally:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()
            os.close(self.life_r)
            os.close(self.life_w)


def spawn(ticket, **over):
    req = {"op": "spawn", "ticket": ticket, "uid": 1900000999, "gid": 1900000999,
           "tmp": 1 << 20, "as": 1 << 30, "fsize": 1 << 30, "nproc": 64, "nofile": 256,
           "env": dict(ENV)}
    req.update(over)
    return req


@pytest.mark.timeout_s(120)
def test_the_c_loop_takes_over_and_answers_as_the_python_loop(tmp_path):
    z = Zygote(tmp_path)
    try:
        # Learners die before their hello here: after two retries the hint is given up,
        # settled, and the loop in C serves from the request after the one that found so.
        loops = [z.ask(spawn(i)) for i in range(5)]
        assert [a["op"] for a in loops] == ["spawned"] * 5, loops
        assert [a["loop"] for a in loops] == ["python"] * 5, loops
        assert [a["ticket"] for a in loops] == list(range(5))
        assert all(a["hint_pages"] == 0 for a in loops), loops
        a = z.ask(spawn("t-c"))
        assert (a["op"], a["loop"], a["ticket"]) == ("spawned", "c", "t-c"), a
        # What the C loop hands back: the Python loop's answers, with the ticket.
        a = z.ask({"op": "bogus", "ticket": 7})
        assert a == {"op": "error", "error": "unknown op 'bogus'", "ticket": 7}, a
        a = z.ask(None, raw=b"{not json")
        assert a["op"] == "error" and a["ticket"] is None, a
        a = z.ask(spawn(8), nfds=1)
        assert a == {"op": "error", "ticket": 8,
                     "error": "a spawn request carries the pipe and the workspace"}, a
        a = z.ask(spawn(9, uid=0))
        assert a == {"op": "error", "ticket": 9, "error": "a kernel never runs as host root"}, a
        a = z.ask(spawn(10, nproc="64"))  # not a JSON integer: Python's int() takes it
        assert (a["op"], a["loop"]) == ("spawned", "python"), a
        # Other kernel paths: Python prepares them and serves; the C loop takes the next.
        other = {"HOME": "/workspace", "IPYTHONDIR": "/workspace/.other"}
        a = z.ask(spawn(11, env=other))
        assert (a["op"], a["loop"]) == ("spawned", "python"), a
        a = z.ask(spawn(12, env=other))
        assert (a["op"], a["loop"], a["ticket"]) == ("spawned", "c", 12), a
        a = z.ask(spawn({"nested": [1]}))
        assert (a["loop"], a["ticket"]) == ("python", {"nested": [1]}), a  # the ENV paths again
        a = z.ask(spawn({"nested": [2]}))
        assert (a["loop"], a["ticket"]) == ("c", {"nested": [2]}), a
    finally:
        z.close()
    assert z.proc.returncode == 0, z.proc.returncode
