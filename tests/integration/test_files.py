"""The workspace file API through `kennel put/get/files` (manager file_* requests): binary-safe
round trips, files shared with the cell, and paths that try to leave the workspace."""

import hashlib
import os

import pytest

from .itest_helpers import run


def _sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


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
    if not kenneld.ok("stats_request")["sandbox"]["disk"]["caps"]:
        pytest.skip("no workspace caps on this machine")
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
