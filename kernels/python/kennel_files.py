"""kennel_files: which workspace files a cell created, changed or deleted.

The kernel takes a Snapshot of the workspace before and after each cell: regular files by
relative path, with their size and mtime. The walk is bounded (MAX_ENTRIES directory
entries, MAX_DEPTH levels), follows no symlink, and skips directories whose name starts with
a dot and __pycache__, so a small workspace costs a few scandir calls and a huge one at most
a few tens of milliseconds. It does not look at file contents, except for files written in
the last few milliseconds before the cell, whose mtime alone cannot tell a rewrite apart.
"""

import hashlib
import itertools
import os
import time

MAX_ENTRIES = 10000  # directory entries one walk looks at
MAX_DEPTH = 16  # directory levels below the workspace
MAX_LISTED = 1000  # names per list in the reply
# File timestamps come from a clock that ticks every few milliseconds (a jiffy), and may lag
# time.time_ns() by one tick: a file written within RACY_NS before a snapshot could be
# written again in the cell with the same size and mtime. Such files are hashed, up to
# RACY_HASH_BYTES per snapshot (git's "racy clean" problem, solved the same way).
RACY_NS = 50_000_000
RACY_HASH_BYTES = 4 << 20
_SKIP_DIRS = {"__pycache__"}


class Snapshot:
    """The regular files under root: {relative path: (size, mtime_ns, ctime_ns)}."""

    def __init__(self, root, max_entries=MAX_ENTRIES, max_depth=MAX_DEPTH):
        self.root = root
        self.started_ns = time.time_ns()
        self.files = {}
        self.digests = {}  # relative path -> hash, for files written just before the snapshot
        self.truncated = False  # the walk stopped at a bound: some files were not seen
        self._walk(max_entries, max_depth)
        self._hash_racy()

    def _walk(self, max_entries, max_depth):
        seen = 0
        todo = [("", 0)]
        while todo:
            rel, depth = todo.pop()
            left = max_entries - seen
            try:
                # At most `left` entries are read, however large the directory.
                with os.scandir(os.path.join(self.root, rel)) as it:
                    entries = list(itertools.islice(it, left + 1))
            except OSError:
                continue  # removed meanwhile, or unreadable: nothing to list
            if len(entries) > left:
                self.truncated = True
                del entries[left:]
            entries.sort(key=lambda e: e.name)
            seen += len(entries)
            subdirs = []
            for entry in entries:
                path = rel + entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name.startswith(".") or entry.name in _SKIP_DIRS:
                            continue
                        if depth + 1 > max_depth:
                            self.truncated = True
                        else:
                            subdirs.append((path + "/", depth + 1))
                    elif entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        self.files[path] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                except OSError:
                    continue
            todo.extend(reversed(subdirs))  # depth first, in name order: a stable prefix
            if seen >= max_entries:
                self.truncated = self.truncated or bool(todo)
                return

    def _hash_racy(self):
        budget = RACY_HASH_BYTES
        for path, (size, mtime_ns, _) in self.files.items():
            if mtime_ns >= self.started_ns - RACY_NS and size <= budget:
                digest = _digest(os.path.join(self.root, path))
                if digest is not None:
                    self.digests[path] = digest
                    budget -= size

    def exists(self, path):
        try:
            os.lstat(os.path.join(self.root, path))
            return True
        except OSError:
            return False


def changes(before, after):
    """What the execute_reply metadata says about the files between two snapshots:
    {"files": [{"name", "size"}], "files_deleted": [names], "files_truncated": bool},
    both lists sorted by name and at most MAX_LISTED long."""
    changed = []
    for path, (size, mtime_ns, ctime_ns) in after.files.items():
        old = before.files.get(path)
        if old is None:
            # Unseen before: new, unless the first walk stopped before reaching it.
            if before.truncated and ctime_ns < before.started_ns - RACY_NS:
                continue
        elif old[:2] == (size, mtime_ns):
            digest = before.digests.get(path)
            if digest is None or _digest(os.path.join(after.root, path)) == digest:
                continue
        changed.append({"name": path, "size": size})
    # Gone from the second walk: deleted, unless that walk stopped before reaching it.
    deleted = [p for p in before.files if p not in after.files
               and not (after.truncated and after.exists(p))]
    changed.sort(key=lambda f: f["name"])
    deleted.sort()
    return {
        "files": changed[:MAX_LISTED],
        "files_deleted": deleted[:MAX_LISTED],
        "files_truncated": (before.truncated or after.truncated or len(changed) > MAX_LISTED
                            or len(deleted) > MAX_LISTED),
    }


def _digest(path):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            return hashlib.blake2b(f.read(RACY_HASH_BYTES + 1), digest_size=16).digest()
        except OSError:
            return None
