"""kennel_files on its own: the bounded workspace walk and the comparison that becomes the
execute_reply's files metadata. Timestamps are set with os.utime, so the cases the clock
rarely shows (a rewrite within one timestamp tick) are tested deterministically."""

import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels" / "python"))
import kennel_files  # noqa: E402
from kennel_files import Snapshot, Tracker, changes  # noqa: E402

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


# ---- Tracker: the same answers as two walks, from inotify ----------------------------------

def _same(tracker, root, cell, **bounds):
    """Runs cell between two tracker snapshots and two walks; returns the tracker's answer
    (and its paths) after checking it is the walks' answer."""
    walk_before, (before, _) = Snapshot(str(root), **bounds), tracker.snapshot()
    assert before.files == walk_before.files
    cell()
    walk_after, (after, paths) = Snapshot(str(root), **bounds), tracker.snapshot()
    assert after.files == walk_after.files
    ours = changes(before, after, paths)
    assert ours == changes(walk_before, walk_after)
    assert after.truncated == walk_after.truncated
    return ours, paths


def _append(path):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK)  # a FIFO: no waiting
    try:
        os.write(fd, b"+")
    finally:
        os.close(fd)


def _random_op(rng, root, outside):
    dirs = ["", "d0/", "d0/d1/", "d2/", "d0/d1/d3/", ".hid/", "d2/__pycache__/"]
    files = [d + f"f{i}" for d in dirs for i in range(3)]
    op = rng.randrange(16)
    path = root / rng.choice(files)
    try:
        if op <= 3:  # write, new or over (never into a FIFO: that would wait for a reader)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK)
            try:
                os.write(fd, b"x" * rng.randrange(4))
            finally:
                os.close(fd)
        elif op == 4:
            path.unlink()
        elif op == 5:  # rename a file, maybe across directories
            target = root / rng.choice(files)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(path, target)
        elif op == 6:  # a directory's tree away
            shutil.rmtree(root / rng.choice(dirs[1:]))
        elif op == 7:  # rename a directory, into a hidden or cache name too
            src, dst = rng.choice(dirs[1:]), rng.choice(["d4/", ".hid2/", "d0/d5/", "__pycache__/"])
            os.rename(root / src, root / dst)
        elif op == 8:  # out of the workspace, and back in later
            os.rename(root / rng.choice(dirs[1:]), outside / f"o{rng.randrange(1000)}")
        elif op == 9:
            kept = sorted(outside.iterdir())
            if kept:
                os.rename(kept[0], root / rng.choice(["d6", "d0/d7", "d2/d8"]))
        elif op == 10:  # mtime set back, or ahead, size kept
            stamp = time.time_ns() + rng.choice([-HOUR_NS, HOUR_NS, 0])
            os.utime(path, ns=(stamp, stamp))
        elif op == 11:  # a file out of the workspace (the test's own: ops write through it)
            os.symlink(outside / "decoy", path)
        elif op == 12:
            os.mkfifo(path)
        elif op == 13:  # a symlink to a directory, in the workspace or out of it
            target = rng.choice(["d0", str(outside), str(outside / "seed")])
            os.symlink(target, root / rng.choice(["d9", "d0/d1/d3"]))
        elif op == 14:  # a directory moved aside and a symlink put in its place
            d = rng.choice(dirs[1:5])[:-1]
            os.rename(root / d, root / (d + "x"))
            os.symlink(d.rsplit("/", 1)[-1] + "x", root / d)
        else:  # an append
            _append(path)
    except OSError:
        pass  # no such file, not empty, exists already: the next op


def _random_cells(tmp_path, seed, cells, watch_from=0, **bounds):
    """Cells of random file operations (and more between cells, which no cell reports):
    what the Tracker says of each cell is what walks before and after it say. Returns the
    tracker and how many files the walks listed and said deleted."""
    import random

    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir(parents=True)
    outside.mkdir()
    (outside / "seed").mkdir()
    (outside / "seed" / "f").write_bytes(b"seed")
    (outside / "decoy").write_bytes(b"decoy")  # what a symlink out of the workspace names
    rng = random.Random(seed)
    tracker = Tracker(str(root), watch_from=watch_from, **bounds)
    tracker.snapshot()
    listed = deleted = 0
    try:
        for _ in range(cells):
            for _ in range(rng.randrange(3)):
                _random_op(rng, root, outside)
            ours, _ = _same(tracker, root, lambda: [_random_op(rng, root, outside)
                                                    for _ in range(rng.randrange(1, 6))],
                            **bounds)
            listed += len(ours["files"])
            deleted += len(ours["files_deleted"])
    finally:
        tracker.close()
    return tracker, listed, deleted


def test_tracker_matches_two_walks_over_random_cells(tmp_path):
    for seed in range(3):
        tracker, listed, deleted = _random_cells(tmp_path / str(seed), seed, 150)
        assert listed > 80 and deleted > 30
        # Watching was set up again only where it had to be (a directory with two names:
        # a symlink in its place followed, say), not after every cell.
        assert tracker.walks < 20


def test_tracker_matches_bounded_walks(tmp_path):
    """The same near the walk's bounds: the tracker walks whenever a walk would stop."""
    tracker, listed, _ = _random_cells(tmp_path, 5, 150, max_entries=12, max_depth=2)
    assert listed > 15 and tracker.walks > 5, (listed, tracker.walks)


def test_tracker_sees_writes_through_another_name(tmp_path):
    """Hard links: a write through one name raises an event for that name's directory only,
    so the tracker re-reads every file it knows to have several names."""
    write(tmp_path, "a/one", b"1", time.time_ns() - HOUR_NS)
    os.link(tmp_path / "a/one", tmp_path / "two")  # two names from the start
    write(tmp_path, "b/three", b"3", time.time_ns() - HOUR_NS)
    (tmp_path / ".hid").mkdir()
    tracker = Tracker(str(tmp_path), watch_from=0)
    tracker.snapshot()
    try:
        for cell, expected in [
                (lambda: _append(tmp_path / "two"), ["a/one", "two"]),
                (lambda: os.link(tmp_path / "b/three", tmp_path / "a/four"), ["a/four"]),
                (lambda: _append(tmp_path / "a/four"), ["a/four", "b/three"]),
                (lambda: os.rename(tmp_path / "a/four", tmp_path / ".hid/four"), ["a/four"]),
                (lambda: _append(tmp_path / ".hid/four"), ["b/three"])]:  # a name not watched
            ours, _ = _same(tracker, tmp_path, cell)
            assert sorted(f["name"] for f in ours["files"] + [{"name": d} for d in
                                                              ours["files_deleted"]]) == expected
    finally:
        tracker.close()


def test_tracker_reads_no_directory_for_a_cell_that_changes_none(tmp_path, monkeypatch):
    for i in range(20):
        write(tmp_path, f"d{i % 4}/f{i}", b"x", time.time_ns() - HOUR_NS)
    tracker = Tracker(str(tmp_path), watch_from=0)
    tracker.snapshot()
    listed = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: listed.append(p) or real_scandir(p))
    before, _ = tracker.snapshot()
    write(tmp_path, "d1/f5", b"changed")
    after, paths = tracker.snapshot()
    assert paths == {"d1/f5"} and listed == []
    assert changes(before, after, paths)["files"] == [{"name": "d1/f5", "size": 7}]
    write(tmp_path, "new/deep/g", b"g")  # a new directory is walked, and only it
    after2, paths = tracker.snapshot()
    assert paths == {"new/deep/g"} and listed == [os.path.join(tmp_path, "new/"),
                                                  os.path.join(tmp_path, "new/deep/")]
    assert changes(after, after2, paths)["files"] == [{"name": "new/deep/g", "size": 1}]


def test_tracker_falls_back_to_walks_when_it_loses_track(tmp_path, monkeypatch):
    write(tmp_path, "a", b"a", time.time_ns() - HOUR_NS)
    tracker = Tracker(str(tmp_path), max_entries=20, watch_from=0)
    tracker.snapshot()
    # The event queue overflowed: the next snapshot walks.
    real_read = os.read
    overflow = kennel_files._EVENT.pack(-1, kennel_files._IN_Q_OVERFLOW, 0, 0)
    monkeypatch.setattr(os, "read",
                        lambda fd, n: overflow if fd == tracker._fd else real_read(fd, n))
    write(tmp_path, "b", b"bb")
    snap, paths = tracker.snapshot()
    monkeypatch.setattr(os, "read", real_read)
    assert paths is None and sorted(snap.files) == ["a", "b"] and tracker.walks == 2
    # User code closed the descriptor and something else took its number: the tracker
    # walks, watches from a new descriptor and leaves that number alone.
    fd = tracker._fd
    r, w = os.pipe()
    os.dup2(r, fd)
    try:
        write(tmp_path, "c", b"ccc")
        snap, paths = tracker.snapshot()
        assert paths is None and sorted(snap.files) == ["a", "b", "c"] and tracker.walks == 3
        os.write(w, b"x")
        assert os.read(fd, 1) == b"x" and tracker._fd != fd
    finally:
        for n in (r, w, fd):
            os.close(n)
    # Past the entry bound: walks (truncated, as a walk says) until RETRY_AFTER of them.
    before, _ = tracker.snapshot()
    for i in range(30):
        write(tmp_path, f"many/{i:02}", b"")
    after, paths = tracker.snapshot()
    assert paths is None and after.truncated
    assert changes(before, after, paths)["files_truncated"]
    walks = tracker.walks
    for _ in range(kennel_files.RETRY_AFTER):
        assert tracker.snapshot()[1] is None
    assert tracker.walks == walks  # plain walks, no inotify set up for each
    # The workspace itself moved away: walks again (and finds nothing there).
    shutil.rmtree(tmp_path / "many")
    tracker.snapshot()
    tracker.snapshot()
    assert tracker._fd >= 0
    os.rename(tmp_path, str(tmp_path) + ".moved")
    try:
        snap, paths = tracker.snapshot()
        assert paths is None and snap.files == {}
    finally:
        os.rename(str(tmp_path) + ".moved", tmp_path)


def test_tracker_counts_entries_as_a_walk_does(tmp_path):
    for i in range(5):
        write(tmp_path, f"f{i}", b"", time.time_ns() - HOUR_NS)
    tracker = Tracker(str(tmp_path), max_entries=10, watch_from=0)
    tracker.snapshot()
    # Entries of every kind count: a symlink, a FIFO, a hidden directory, one directory.
    ours, paths = _same(tracker, tmp_path, lambda: (
        os.symlink("f0", tmp_path / "s"), os.mkfifo(tmp_path / "p"),
        os.mkdir(tmp_path / ".h"), os.mkdir(tmp_path / "d")), max_entries=10)
    assert paths is not None and not ours["files_truncated"]  # 9 entries: still watching
    # 10: a walk reads no more, so the tracker walks (and a walk that read everything by
    # then is not truncated); 11: truncated.
    ours, paths = _same(tracker, tmp_path, lambda: write(tmp_path, "d/x", b""),
                        max_entries=10)
    assert paths is None and not ours["files_truncated"]
    ours, paths = _same(tracker, tmp_path, lambda: write(tmp_path, "d/y", b""),
                        max_entries=10)
    assert paths is None and ours["files_truncated"]
    tracker.close()


def test_tracker_hashes_a_file_rewritten_within_one_timestamp_tick(tmp_path):
    tracker = Tracker(str(tmp_path), watch_from=0)
    tracker.snapshot()
    stamp = time.time_ns()
    write(tmp_path, "same.txt", b"aaaa", stamp)  # between cells: the next one's baseline
    ours, _ = _same(tracker, tmp_path, lambda: write(tmp_path, "same.txt", b"bbbb", stamp))
    assert ours["files"] == [{"name": "same.txt", "size": 4}]
    tracker.close()


def _watches(tracker):
    with open(f"/proc/self/fdinfo/{tracker._fd}") as f:
        return sum(line.startswith("inotify wd:") for line in f)


def test_tracker_drops_the_watches_of_a_directory_that_left(tmp_path):
    root, outside = tmp_path / "ws", tmp_path / "outside"
    write(root, "d/e/f/x", b"x")
    outside.mkdir()
    tracker = Tracker(str(root), watch_from=0)
    tracker.snapshot()
    assert _watches(tracker) == 4
    ours, _ = _same(tracker, root, lambda: os.rename(root / "d", outside / "d"))
    assert ours["files_deleted"] == ["d/e/f/x"] and _watches(tracker) == 1
    ours, _ = _same(tracker, root, lambda: write(outside, "d/e/y", b"y"))  # not ours now
    assert ours["files"] == []
    tracker.close()


def test_tracker_never_follows_a_symlink_put_where_a_directory_was(tmp_path):
    write(tmp_path, "b/x", b"x", time.time_ns() - HOUR_NS)
    write(tmp_path, "b/sub/z", b"z", time.time_ns() - HOUR_NS)
    tracker = Tracker(str(tmp_path), watch_from=0)
    tracker.snapshot()

    def cell():
        os.mkdir(tmp_path / "a")
        os.rmdir(tmp_path / "a")
        os.symlink("b", tmp_path / "a")

    ours, paths = _same(tracker, tmp_path, cell)
    assert ours["files"] == [] and paths == {"a"}  # still watching: nothing walked through a
    ours, _ = _same(tracker, tmp_path, lambda: write(tmp_path, "b/y", b"y"))
    assert ours["files"] == [{"name": "b/y", "size": 1}]

    def swap():  # a directory moved aside, a symlink to it in its place
        os.rename(tmp_path / "b", tmp_path / "c")
        os.symlink("c", tmp_path / "b")

    ours, _ = _same(tracker, tmp_path, swap)
    assert [f["name"] for f in ours["files"]] == ["c/sub/z", "c/x", "c/y"]
    assert ours["files_deleted"] == ["b/sub/z", "b/x", "b/y"]
    tracker.close()


def test_tracker_walks_when_the_workspace_or_a_directory_mode_changes(tmp_path):
    root = tmp_path / "base" / "ws"
    write(root, "d/x", b"x")
    tracker = Tracker(str(root), watch_from=0)
    tracker.snapshot()
    walks = tracker.walks
    ours, paths = _same(tracker, root, lambda: os.chmod(root / "d", 0o700))
    assert paths is None and tracker.walks == walks + 1
    ours, paths = _same(tracker, root, lambda: os.chmod(root, 0o700))  # its own watch says
    assert paths is None and tracker.walks == walks + 2
    # Another directory at the workspace's path: the next snapshot is a walk of it.
    os.rename(tmp_path / "base", tmp_path / "old")
    write(root, "new.txt", b"n")
    snap, paths = tracker.snapshot()
    assert paths is None and sorted(snap.files) == ["new.txt"]
    tracker.close()


def test_a_small_workspace_is_walked_and_a_large_one_watched(tmp_path):
    tracker = Tracker(str(tmp_path), watch_from=20)
    write(tmp_path, "a", b"a")
    tracker.snapshot()
    assert tracker._fd < 0 and tracker.walks == 0
    ours, paths = _same(tracker, tmp_path,
                        lambda: [write(tmp_path, f"d/{i}", b"") for i in range(25)])
    assert paths is None and len(ours["files"]) == 25 and tracker._fd >= 0
    ours, paths = _same(tracker, tmp_path, lambda: write(tmp_path, "d/3", b"3"))
    assert paths == {"d/3"} and ours["files"] == [{"name": "d/3", "size": 1}]
    tracker.close()


def test_names_that_are_not_utf8_are_listed_escaped(tmp_path):
    """JSON carries no such name: it shows each stray byte as \\xNN and says so (it once
    became '?', or, in kenneld's own lists, vanished)."""
    root = os.fsencode(tmp_path)
    old = os.path.join(root, b"old\xff.txt")
    with open(old, "wb") as f:
        f.write(b"o")
    os.utime(old, ns=(time.time_ns() - HOUR_NS,) * 2)

    def cell():
        os.mkdir(os.path.join(root, b"d\xe9"))
        with open(os.path.join(root, b"d\xe9", b"caf\xc3\xa9-\xe9.txt"), "wb") as f:
            f.write(b"xy")
        os.remove(old)

    assert diff(tmp_path, cell) == {
        "files": [{"name": "d\\xe9/café-\\xe9.txt", "size": 2, "utf8": False}],
        "files_deleted": ["old\\xff.txt"], "files_truncated": False}


# ---- Tracker: a small workspace's walk, not repeated while nothing changed -----------------

def _settle():
    """Past RACY_NS since the last change: a walk now keeps what it read (Tracker's
    _revalidate); timestamps come from a clock a tick behind, hence twice over."""
    time.sleep(2 * kennel_files.RACY_NS / 1e9)


def _counting_scandir(monkeypatch, fail=()):
    listed = []
    real = os.scandir

    def scandir(path):
        listed.append(path)
        if any(str(path).endswith(f) for f in fail):
            raise OSError(24, "Too many open files")
        return real(path)

    monkeypatch.setattr(kennel_files.os, "scandir", scandir)
    return listed


def _outside_changes(root, outside):
    os.link(root / "d" / "linked", outside / "linked")
    return {
        "new file": lambda: write(root, "new", b"n"),
        "new file below": lambda: write(root, "d/e/new", b"n"),
        "same size, mtime reset": lambda: (
            (root / "a").write_bytes(b"A"), os.utime(root / "a", ns=(HOUR_NS, HOUR_NS))),
        "truncated": lambda: (root / "d" / "b").write_bytes(b""),
        "deleted below": lambda: (root / "d" / "e" / "c").unlink(),
        "directory renamed": lambda: os.rename(root / "d" / "e", root / "d" / "f"),
        "directory made": lambda: (root / "g").mkdir(),
        "file made a symlink": lambda: ((root / "a").unlink(), os.symlink("d", root / "a")),
        "written through a name outside": lambda: _append(outside / "linked"),
        "mode changed": lambda: os.chmod(root / "d", 0o500),
        "in a hidden directory": lambda: write(root, ".hid/x", b"x"),
    }


def _tree(tmp_path, name):
    root, outside = tmp_path / name / "ws", tmp_path / name / "out"
    for rel in ("a", "d/b", "d/linked", "d/e/c", ".hid/h"):
        write(root, rel, b"x", mtime_ns=HOUR_NS)
    outside.mkdir()
    return root, outside


def test_a_small_workspace_is_walked_again_only_when_something_changed(tmp_path, monkeypatch):
    """Each change made between two snapshots (from outside a cell: `kennel put`, a thread,
    a subprocess) is seen as two walks see it; a snapshot after none lists no directory."""
    for name in _outside_changes(*_tree(tmp_path, "probe")):
        root, outside = _tree(tmp_path, name.replace(" ", "_"))
        change = _outside_changes(root, outside)[name]
        tracker = Tracker(str(root))
        _settle()
        tracker.snapshot()  # a walk, kept
        walk_before = Snapshot(str(root))
        listed = _counting_scandir(monkeypatch)
        before, _ = tracker.snapshot()
        assert listed == [] and before.files == walk_before.files, name
        change()
        walk_after = Snapshot(str(root))
        del listed[:]
        after, paths = tracker.snapshot()
        assert paths is None and after.files == walk_after.files, name
        assert changes(before, after) == changes(walk_before, walk_after), name
        if name == "in a hidden directory":
            assert listed == [], "walked for a change no walk lists"
        else:
            assert listed, f"{name}: not walked again"
        monkeypatch.undo()


class _CoarseStat:
    """A stat result with its mtime and ctime on TICK_NS ticks, as kernels before
    multigrain timestamps (Linux 6.13) give them: this one's are fine-grained once read."""

    TICK_NS = 40_000_000  # under RACY_NS, as a jiffy is

    def __init__(self, st):
        self._st = st
        self.st_mtime_ns = st.st_mtime_ns // self.TICK_NS * self.TICK_NS
        self.st_ctime_ns = st.st_ctime_ns // self.TICK_NS * self.TICK_NS

    def __getattr__(self, name):
        return getattr(self._st, name)


def test_a_change_within_a_tick_of_a_walk_is_not_missed(tmp_path, monkeypatch):
    """A walk that sees a directory (or file) changed within RACY_NS keeps nothing: a change
    right after it, in the same timestamp tick, would leave mtime and ctime as they were."""
    root = tmp_path / "ws"
    (root / "d" / "e" / "z").mkdir(parents=True)
    real_stat = os.stat
    monkeypatch.setattr(kennel_files.os, "stat", lambda *a, **k: _CoarseStat(real_stat(*a, **k)))
    tracker = Tracker(str(root))
    _settle()
    tracker.snapshot()
    for _ in range(5):  # (a tick may end between the two changes: it is then seen anyway)
        (root / "d" / "e" / "z").rmdir()
        before = tracker.snapshot()[0]  # a walk: d/e changed just now
        write(root, "d/e/y", b"2")  # nearly always within the same tick
        assert changes(before, tracker.snapshot()[0])["files"] == [{"name": "d/e/y", "size": 1}]
        (root / "d" / "e" / "y").unlink()
        (root / "d" / "e" / "z").mkdir()
        _settle()
        tracker.snapshot()


def test_a_walk_that_failed_somewhere_is_not_kept(tmp_path, monkeypatch):
    """A listing that failed (descriptors exhausted by user code, say) lists nothing for that
    directory; the next snapshot walks again rather than keep that answer."""
    root, _ = _tree(tmp_path, "ws")
    tracker = Tracker(str(root))
    _settle()
    _counting_scandir(monkeypatch, fail=["/d/e/"])
    assert "d/e/c" not in tracker.snapshot()[0].files
    monkeypatch.undo()
    listed = _counting_scandir(monkeypatch)
    assert "d/e/c" in tracker.snapshot()[0].files and len(listed) == 3
    # and that walk, complete, is kept
    assert "d/e/c" in tracker.snapshot()[0].files and len(listed) == 3


def test_tracker_walking_a_small_workspace_matches_two_walks_over_random_cells(tmp_path):
    for seed in range(2):
        _, listed, deleted = _random_cells(tmp_path / str(seed), seed, 100,
                                           watch_from=10**6)
        assert listed > 50 and deleted > 20
