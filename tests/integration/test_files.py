"""The workspace file API through `kennel put/get/files` (manager file_* requests): binary-safe
round trips, files shared with the cell, and paths that try to leave the workspace."""

import hashlib
import os
import re
import shutil
import subprocess
import time

import pytest

from .itest_helpers import control, run, skip_without_disk_caps, wait_for


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.spawner
def test_put_get_round_trip_and_the_cell_sees_it(kenneld, connect, tmp_path):
    info = kenneld.create("files")
    kc = connect(info["connection_file"])
    blob = tmp_path / "blob.bin"
    blob.write_bytes(os.urandom(5 << 20))
    r = kenneld.cli("put", "files", str(blob), "data/blob.bin")
    assert r.returncode == 0, r.stderr
    listing = kenneld.cli("files", "files").stdout
    assert f"{5 << 20}  data/blob.bin" in listing
    cell = run(kc, "import hashlib\nhashlib.sha256(open('data/blob.bin','rb').read()).hexdigest()")
    assert cell.result == repr(_sha(blob))
    # The kernel owns what kenneld put there: it may change and remove it.
    assert run(kc, "open('data/blob.bin', 'ab').write(b'x'); 'ok'").result == "'ok'"
    out = tmp_path / "back.bin"
    assert kenneld.cli("get", "files", "data/blob.bin", str(out)).returncode == 0
    assert out.read_bytes() == blob.read_bytes() + b"x"
    # And what the cell made comes out.
    run(kc, "open('made.txt', 'w').write('from the cell')")
    assert kenneld.cli("get", "files", "made.txt", "-").stdout == "from the cell"
    # Into a directory, under the file's own name, as cp does (it failed: "Is a directory").
    (tmp_path / "into").mkdir()
    assert kenneld.cli("get", "files", "made.txt", str(tmp_path / "into")).returncode == 0
    assert (tmp_path / "into" / "made.txt").read_text() == "from the cell"
    # `kennel files` lists in name order (kenneld in the directories' order).
    run(kc, "for n in ('zeta', 'alpha', 'mu', 'beta'): open(n, 'w').close()")
    names = [line.split(None, 1)[1] for line in kenneld.cli("files", "files").stdout.splitlines()]
    assert names == sorted(names) and {"alpha", "zeta"} <= set(names), names


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "data/../../x", "", "."])
def test_paths_outside_the_workspace_are_refused(kenneld, tmp_path, path):
    kenneld.create("files")
    r = kenneld.cli("get", "files", path, str(tmp_path / "x"))
    assert r.returncode != 0 and "BadPath" in r.stderr
    src = tmp_path / "src"
    src.write_text("x")
    r = kenneld.cli("put", "files", str(src), path)
    assert r.returncode != 0 and "BadPath" in r.stderr


def test_planted_symlinks_and_fifos_are_refused(kenneld, connect, tmp_path):
    info = kenneld.create("files")
    kc = connect(info["connection_file"])
    with open("/etc/shadow", "rb") as f:
        shadow = f.read()
    run(kc, "import os\nos.symlink('/etc/shadow', 'evil')\nos.mkdir('d')\n"
            "os.symlink('/etc', 'd/etc')\nos.mkfifo('fifo')")
    for path in ("evil", "d/etc/shadow"):
        r = kenneld.cli("get", "files", path, str(tmp_path / "x"), timeout=10)
        assert r.returncode != 0 and "symlink" in r.stderr, (path, r.stderr)
    r = kenneld.cli("get", "files", "fifo", str(tmp_path / "x"), timeout=10)  # must not block
    assert r.returncode != 0 and "not a regular file" in r.stderr
    src = tmp_path / "src"
    src.write_text("overwritten?")
    assert kenneld.cli("put", "files", str(src), "d/etc/shadow").returncode != 0
    # Putting onto the link replaces the link, never its target.
    assert kenneld.cli("put", "files", str(src), "evil").returncode == 0
    with open("/etc/shadow", "rb") as f:
        assert f.read() == shadow
    assert run(kc, "import os\n(os.path.islink('evil'), open('evil').read())").result == \
        "(False, 'overwritten?')"


@pytest.mark.parametrize("kenneld", [["--max-file", "1M"]], indirect=True)
def test_file_size_cap(kenneld, connect, tmp_path):
    info = kenneld.create("files")
    kc = connect(info["connection_file"])
    big = tmp_path / "big"
    big.write_bytes(b"z" * (2 << 20))
    r = kenneld.cli("put", "files", str(big))
    assert r.returncode != 0 and "TooLarge" in r.stderr
    run(kc, "open('big', 'wb').write(b'y' * (2 << 20))")
    r = kenneld.cli("get", "files", "big", str(tmp_path / "x"))
    assert r.returncode != 0 and "TooLarge" in r.stderr
    small = tmp_path / "small"
    small.write_bytes(b"s" * (900 << 10))
    assert kenneld.cli("put", "files", str(small)).returncode == 0


@pytest.mark.parametrize("kenneld", [["--max-file", "80M"]], indirect=True)
def test_files_past_64_mib_move_when_max_file_allows(kenneld, connect, tmp_path):
    # The manager's message limit grows with --max-file (such a put was dropped unanswered).
    kenneld.create("files")
    big = tmp_path / "big"
    big.write_bytes(b"q" * (70 << 20))
    r = kenneld.cli("put", "files", str(big))
    assert r.returncode == 0, r.stderr
    back = tmp_path / "back"
    r = kenneld.cli("get", "files", "big", str(back))
    assert r.returncode == 0, r.stderr
    assert back.stat().st_size == 70 << 20


def test_unknown_session_and_missing_file(kenneld, tmp_path):
    kenneld.create("files")
    r = kenneld.cli("get", "nobody", "x", str(tmp_path / "x"))
    assert r.returncode != 0 and "NoSuchSession" in r.stderr
    r = kenneld.cli("get", "files", "nothing-here", str(tmp_path / "x"))
    assert r.returncode != 0 and "NoSuchFile" in r.stderr


@pytest.mark.parametrize("kenneld", [["--disk", "16M", "--max-file", "32M"]], indirect=True)
def test_put_into_a_full_workspace_fails_cleanly(kenneld, connect, tmp_path):
    """kenneld writes into a capped workspace as root, yet within the cap: a file larger than
    the workspace is refused with ENOSPC, leaves nothing behind, and the session goes on."""
    info = kenneld.create("files")
    skip_without_disk_caps(kenneld)
    kc = connect(info["connection_file"])
    big = tmp_path / "big"
    big.write_bytes(b"b" * (20 << 20))
    r = kenneld.cli("put", "files", str(big))
    assert r.returncode != 0 and "FileError" in r.stderr and "No space left" in r.stderr, r.stderr
    assert "big" not in kenneld.cli("files", "files").stdout
    small = tmp_path / "small"
    small.write_bytes(b"s" * (1 << 20))
    assert kenneld.cli("put", "files", str(small)).returncode == 0
    assert run(kc, "len(open('small', 'rb').read())").result == str(1 << 20)


# ---- a new session's workspace image is made off kenneld's loop ---------------------------------

NO_POOL = ["--pool", "0"]  # every session's image is then made as it is created


def _pipelined(kenneld, *requests):
    """Send every (msg_type, content, buffers) on the manager socket before reading any reply
    (kenneld takes them in one go); their reply contents, in order."""
    sock, session = kenneld._sock, kenneld._session
    ids = [session.send(sock, t, c, buffers=b)["header"]["msg_id"] for t, c, b in requests]
    replies = {}
    deadline = time.monotonic() + 30
    while len(replies) < len(ids):
        assert sock.poll(max(int((deadline - time.monotonic()) * 1000), 1)), "no manager reply"
        _, frames = session.feed_identities(sock.recv_multipart())
        msg = session.deserialize(frames)
        replies[msg["parent_header"]["msg_id"]] = msg["content"]
    return [replies[i] for i in ids]


def _workspace_mounts(kenneld):
    """Workspace images mounted in kenneld's mount namespace (it has its own)."""
    with open(f"/proc/{kenneld.proc.pid}/mountinfo") as f:
        return [line.split()[4] for line in f if str(kenneld.state_dir) in line.split()[4]]


@pytest.mark.spawner
@pytest.mark.parametrize("kenneld", [NO_POOL], indirect=True)
def test_a_put_right_after_create_lands_in_the_new_workspace(kenneld, connect):
    """The create reply goes out while the session's image is still being made: a put that
    follows at once waits for the image, so the file is in it (not in the directory under
    the mount, where neither the kernel nor a later get would find it)."""
    skip_without_disk_caps(kenneld)
    for i in range(3):
        sent = time.monotonic()
        created, put, listed = _pipelined(
            kenneld, ("create_request", {"name": f"early{i}"}, None),
            ("file_put_request", {"session": f"early{i}", "path": "early.txt"}, [b"early"]),
            ("file_list_request", {"session": f"early{i}"}, None))
        waited_ms = (time.monotonic() - sent) * 1000
        assert created["status"] == "ok" and put["status"] == "ok", (created, put)
        # The put is answered once the image is mounted (the broker tells the manager), not
        # at the manager's next retry a second later.
        made = re.search(rf"session={created['session']['id']}: workspace image \(\d+ MiB\) "
                         r"made and mounted in (\d+) ms", kenneld.log(tail=None))
        assert made, kenneld.log()
        assert waited_ms < int(made.group(1)) + 500, (waited_ms, made.group(0))
        assert [f["path"] for f in listed["files"]] == ["early.txt"]
        kc = connect(created["session"]["connection_file"])
        assert run(kc, "open('early.txt').read()").result == "'early'"
        kenneld.ok("end_request", {"session": f"early{i}"})


@pytest.mark.parametrize("kenneld", [NO_POOL], indirect=True)
def test_a_session_ended_while_its_image_is_made_leaves_nothing(kenneld):
    """Ended before its workspace image is ready: the image is still finished off the loop,
    then unmounted and removed with the session's directory; kenneld goes on serving."""
    skip_without_disk_caps(kenneld)
    before = set(os.listdir(kenneld.state_dir / "sessions"))
    for i in range(3):
        created, ended = _pipelined(kenneld, ("create_request", {"name": f"brief{i}"}, None),
                                    ("end_request", {"session": f"brief{i}"}, None))
        assert created["status"] == "ok" and ended["status"] == "ok", (created, ended)
    wait_for(lambda: set(os.listdir(kenneld.state_dir / "sessions")) == before
             and not _workspace_mounts(kenneld), timeout=20, what="the images undone")
    assert kenneld.sessions() == []
    assert kenneld.ok("info_request", {"session": kenneld.create("after")["id"]})


class _MountsTraced:
    """strace on every thread of kenneld (the worker thread among them), doing `inject` to
    its mount(2) calls while the block runs."""

    def __init__(self, kenneld, inject):
        self.kenneld, self.inject, self.tracer = kenneld, inject, None

    def __enter__(self):
        strace = shutil.which("strace")
        if strace is None:
            pytest.skip("needs strace to act on mount(2)")
        pid = self.kenneld.proc.pid
        tids = os.listdir(f"/proc/{pid}/task")
        self.tracer = subprocess.Popen([strace, "-qq", "-o", "/dev/null",
                                        *sum((["-p", t] for t in tids), []),
                                        "-e", "trace=mount", "-e", f"inject=mount:{self.inject}"],
                                       stderr=subprocess.DEVNULL)

        def traced():
            with open(f"/proc/{pid}/task/{tids[-1]}/status") as f:
                return any(line.startswith("TracerPid:") and line.split()[1] != "0"
                           for line in f)
        wait_for(traced, timeout=10, what="strace attached")
        return self

    def __exit__(self, *exc):
        self.tracer.kill()
        self.tracer.wait()


@pytest.mark.spawner
@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [NO_POOL], indirect=True)
def test_a_workspace_image_that_cannot_be_mounted_fails_the_start_not_kenneld(kenneld, connect):
    """strace makes kenneld's mount(2) calls fail: the session is still created; its first
    cell gets an error naming the failed step, a file request gets DiskUnavailable (never a
    file under the mount point), and once mounts work again the next cell starts a kernel."""
    skip_without_disk_caps(kenneld)
    with _MountsTraced(kenneld, "error=ENOSPC"):
        info = kenneld.create("unmounted")
        kc = connect(info["connection_file"], ready=False)
        cell = run(kc, "1+1")
        assert cell.content["status"] == "error", cell.content
        assert "cannot set up the workspace's disk: mount the workspace image: No space left" \
            in cell.content["evalue"], cell.content
        r = kenneld.cli("put", "unmounted", "/etc/hostname", "x")
        assert r.returncode != 0 and "DiskUnavailable" in r.stderr, r.stderr
        assert not os.listdir(kenneld.state_dir / "sessions" / info["id"] / "workspace")
    cell = run(kc, "import os; os.listdir('.')", timeout=30)
    assert cell.content["status"] == "ok" and cell.result == "[]", cell.content
    assert kenneld.cli("put", "unmounted", "/etc/hostname", "x").returncode == 0
    assert run(kc, "os.listdir('.')").result == "['x']"


@pytest.mark.spawner
@pytest.mark.own_kenneld
@pytest.mark.parametrize("kenneld", [NO_POOL], indirect=True)
def test_a_restart_asked_for_while_the_image_is_made_is_carried_out(kenneld, connect):
    """A client restarts the kernel (shutdown_request, restart) while its session's image is
    still being made (strace holds mount(2) for a second): the restart is answered, the
    kernel that starts afterwards serves, and the session is not left waiting for ever."""
    skip_without_disk_caps(kenneld)
    with _MountsTraced(kenneld, "delay_enter=1000000"):
        info = kenneld.create("restarted")
        kc = connect(info["connection_file"], ready=False)
        reply = control(kc, "shutdown_request", {"restart": True})
        assert reply["content"] == {"status": "ok", "restart": True}, reply["content"]
        cell = run(kc, "1+1", timeout=30)
    assert cell.content["status"] == "ok" and cell.result == "2", cell.content
    assert run(kc, "1+2").result == "3"


def test_names_that_are_not_utf8_are_listed(kenneld, connect):
    """A name JSON cannot carry is listed with its stray bytes as \\xNN, flagged, in kenneld's
    list and in the cell's reply (once missing from the one and '?' in the other)."""
    kc = connect(kenneld.create("latin1")["connection_file"])
    cell = run(kc, "open(b'caf\\xe9.txt', 'wb').write(b'abc')")
    assert cell.reply["metadata"]["files"] == [{"name": "caf\\xe9.txt", "size": 3, "utf8": False}]
    listed = kenneld.ok("file_list_request", {"session": "latin1"})["files"]
    assert [(f["path"], f["size"], f.get("utf8")) for f in listed] == [("caf\\xe9.txt", 3, False)]
    assert "caf\\xe9.txt  (not UTF-8" in kenneld.cli("files", "latin1").stdout
    # A valid name holding a backslash is not mistaken for one.
    run(kc, "import os; os.remove(b'caf\\xe9.txt'); open('a\\\\xe9', 'w').write('z')")
    listed = kenneld.ok("file_list_request", {"session": "latin1"})["files"]
    assert [(f["path"], f.get("utf8")) for f in listed] == [("a\\xe9", None)]
