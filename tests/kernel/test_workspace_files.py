"""kennel_files on its own: the bounded workspace walk and the comparison that becomes the
execute_reply's files metadata. Timestamps are set with os.utime, so the cases the clock
rarely shows (a rewrite within one timestamp tick) are tested deterministically."""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import kennel_files  # noqa: E402
from kennel_files import Snapshot, changes  # noqa: E402

HOUR_NS = 3600 * 10**9


def write(root, rel, data, mtime_ns=None):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def diff(root, cell, **limits):
    before = Snapshot(str(root), **limits)
    cell()
    return changes(before, Snapshot(str(root), **limits))


def test_created_changed_deleted(tmp_path):
    write(tmp_path, "keep.txt", b"k", time.time_ns() - HOUR_NS)
    write(tmp_path, "grow.txt", b"g", time.time_ns() - HOUR_NS)
    write(tmp_path, "gone.txt", b"x", time.time_ns() - HOUR_NS)

    def cell():
        write(tmp_path, "sub/new.bin", b"12345")
        write(tmp_path, "grow.txt", b"gg")
        os.remove(tmp_path / "gone.txt")

    assert diff(tmp_path, cell) == {
        "files": [{"name": "grow.txt", "size": 2}, {"name": "sub/new.bin", "size": 5}],
        "files_deleted": ["gone.txt"], "files_truncated": False}
    assert diff(tmp_path, lambda: None) == {"files": [], "files_deleted": [],
                                            "files_truncated": False}


def test_rewrite_within_one_timestamp_tick_is_seen(tmp_path):
    """The file's mtime is the same before and after (a coarse clock): the content decides."""
    stamp = time.time_ns()
    write(tmp_path, "same.txt", b"aaaa", stamp)
    assert diff(tmp_path, lambda: write(tmp_path, "same.txt", b"bbbb", stamp))["files"] == [
        {"name": "same.txt", "size": 4}]
    # Same bytes written again: not a change.
    assert diff(tmp_path, lambda: write(tmp_path, "same.txt", b"bbbb", stamp))["files"] == []


def test_racy_hashing_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(kennel_files, "RACY_HASH_BYTES", 10)
    write(tmp_path, "a", b"x" * 8)
    write(tmp_path, "b", b"y" * 8)
    write(tmp_path, "old", b"z", time.time_ns() - HOUR_NS)
    snap = Snapshot(str(tmp_path))
    assert list(snap.digests) == ["a"]  # b did not fit in what was left; old is not racy


def test_hidden_dirs_caches_symlinks_and_special_files_are_skipped(tmp_path):
    def cell():
        write(tmp_path, ".ipython/profile/x", b"x")
        write(tmp_path, "pkg/__pycache__/m.pyc", b"x")
        write(tmp_path, ".env", b"SECRET=1")  # a hidden file is the user's
        os.symlink("/etc", tmp_path / "etc")
        os.symlink("/etc/passwd", tmp_path / "passwd")
        os.mkfifo(tmp_path / "fifo")

    assert diff(tmp_path, cell)["files"] == [{"name": ".env", "size": 8}]


def test_entry_bound_truncates_and_keeps_what_it_can_tell(tmp_path):
    for i in range(30):
        write(tmp_path, f"d/f{i:02}", b"", time.time_ns() - HOUR_NS)
    # Their ctime is now: let it age past the window in which a file unseen by a truncated
    # first walk counts as created during the cell.
    time.sleep(kennel_files.RACY_NS / 1e9 + 0.01)
    snap = Snapshot(str(tmp_path), max_entries=10)
    assert snap.truncated and len(snap.files) == 9  # "d" itself is the first entry
    # A file created in the cell is listed; files pushed out of the walk's reach by it are
    # not reported deleted; nothing else is invented.
    result = diff(tmp_path, lambda: write(tmp_path, "a.txt", b"new"), max_entries=10)
    assert result == {"files": [{"name": "a.txt", "size": 3}], "files_deleted": [],
                      "files_truncated": True}
    # Removing a file lets one more into the walk: that one is not new.
    result = diff(tmp_path, lambda: os.remove(tmp_path / "a.txt"), max_entries=10)
    assert result == {"files": [], "files_deleted": ["a.txt"], "files_truncated": True}


def test_a_huge_directory_is_not_read_whole(tmp_path, monkeypatch):
    big = tmp_path / "big"
    big.mkdir()
    for i in range(50):
        (big / f"{i}").touch()
    read = []
    real_scandir = os.scandir

    class Counting:
        def __init__(self, path):
            self._it = real_scandir(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._it.close()

        def __iter__(self):
            for entry in self._it:
                read.append(entry.name)
                yield entry

    monkeypatch.setattr(os, "scandir", Counting)
    snap = Snapshot(str(tmp_path), max_entries=20)
    assert snap.truncated and len(snap.files) == 19
    assert len(read) <= 21 + 1  # the bound, plus one to know there is more


def test_depth_bound(tmp_path):
    write(tmp_path, "a/b/c/d/deep.txt", b"x")
    write(tmp_path, "a/top.txt", b"x")
    snap = Snapshot(str(tmp_path), max_depth=2)
    assert snap.truncated and sorted(snap.files) == ["a/top.txt"]


def test_list_length_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(kennel_files, "MAX_LISTED", 3)

    def cell():
        for i in range(5):
            write(tmp_path, f"f{i}", b"")

    result = diff(tmp_path, cell)
    assert [f["name"] for f in result["files"]] == ["f0", "f1", "f2"]
    assert result["files_truncated"] is True


def test_a_missing_workspace_lists_nothing(tmp_path):
    snap = Snapshot(str(tmp_path / "nowhere"))
    assert snap.files == {} and not snap.truncated
