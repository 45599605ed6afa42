"""kennel_files: which workspace files a cell created, changed or deleted.

The kernel takes a Snapshot of the workspace before and after each cell: regular files by
relative path, with their size and mtime. The walk is bounded (MAX_ENTRIES directory
entries, MAX_DEPTH levels), follows no symlink, and skips directories whose name starts with
a dot and __pycache__. It does not look at file contents, except for files written in the
last few milliseconds before the cell, whose mtime alone cannot tell a rewrite apart.

A walk stats every file: ~10 ms for 2000 files on this VM kind, twice per cell. So the
kernel keeps a Tracker instead: one walk, then inotify on every directory it walked, and
each later snapshot re-stats only the paths inotify named since the last one (and walks only
directories that appeared). Whenever it cannot vouch for what it holds — the event queue
overflowed, a bound was reached, the workspace itself moved, the descriptor is no longer
its inotify — it drops its state and the next snapshot is a walk again.

A smaller workspace is walked, but a walk is not repeated while nothing it read can have
changed: each directory it listed has the same inode, mtime and ctime, each file the same
size, mtime and ctime (see Tracker._revalidate). An empty workspace then costs one stat
instead of a directory listing (five system calls), twice a cell.
"""

import ctypes
import errno
import fcntl
import hashlib
import itertools
import os
import resource
import stat
import struct
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
RETRY_AFTER = 8  # snapshots a Tracker takes by walking after it could not start watching
# Entries from which a Tracker watches rather than walks: a smaller tree is walked in under a
# millisecond, and watching costs each kernel ~0.25 MiB (the ctypes and os paths it runs).
WATCH_FROM = 256
_SKIP_DIRS = {"__pycache__"}


class Snapshot:
    """The regular files under root: {relative path: (size, mtime_ns, ctime_ns)}."""

    def __init__(self, root, max_entries=MAX_ENTRIES, max_depth=MAX_DEPTH, on_dir=None,
                 start=("", 0), stat_dirs=False):
        """on_dir(rel): called before each directory is listed ("" is root, "a/b/" below).
        start: (directory, its depth) to walk from instead of root. stat_dirs: keep each
        listed directory's stat, taken before its listing, in dir_stats (Tracker's
        _revalidate), or None there if any listing or stat failed, or if a directory or
        file changed within RACY_NS before the walk."""
        self.root = root
        self.started_ns = time.time_ns()
        self.files = {}
        self.digests = {}  # relative path -> hash, for files written just before the snapshot
        self.truncated = False  # the walk stopped at a bound: some files were not seen
        self.seen = 0  # directory entries the walk looked at
        self.dir_entries = {}  # directory -> entries the walk read in it
        self.linked = set()  # files with more than one name (hard links)
        self.inodes = {}  # file -> inode number
        self.dir_stats = {} if stat_dirs else None  # directory -> _dir_id() before listing
        self._walk(max_entries, max_depth, on_dir, start)
        self._hash_racy(self.files)

    @classmethod
    def known(cls, root, started_ns, files, seen, dir_entries, linked, inodes, dir_stats=None):
        """A snapshot of what is known without a walk (a walk's answer revalidated, or
        inotify's): every field a walk sets, so that none is forgotten."""
        snap = cls.__new__(cls)
        snap.root, snap.started_ns, snap.files = root, started_ns, files
        snap.digests, snap.truncated, snap.seen = {}, False, seen
        snap.dir_entries, snap.linked, snap.inodes = dir_entries, linked, inodes
        snap.dir_stats = dir_stats
        return snap

    def _walk(self, max_entries, max_depth, on_dir, start):
        seen = 0
        todo = [start]
        while todo:
            rel, depth = todo.pop()
            left = max_entries - seen
            if on_dir is not None:
                on_dir(rel)
            try:
                path = os.path.join(self.root, rel)
                if self.dir_stats is not None:
                    st = os.stat(path)
                    if _is_racy(st.st_ctime_ns, self.started_ns):
                        self.dir_stats = None  # changed within a tick: see _revalidate
                    else:
                        self.dir_stats[rel] = _dir_id(st)
                # At most `left` entries are read, however large the directory.
                with os.scandir(path) as it:
                    entries = list(itertools.islice(it, left + 1))
            except OSError:
                self.dir_stats = None  # (EMFILE, say: a walk's answer, not one to keep)
                continue  # removed meanwhile, or unreadable: nothing to list
            if len(entries) > left:
                self.truncated = True
                del entries[left:]
            entries.sort(key=lambda e: e.name)
            seen += len(entries)
            self.dir_entries[rel] = len(entries)
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
                        self.inodes[path] = st.st_ino
                        if st.st_nlink > 1:
                            self.linked.add(path)
                except OSError:
                    self.dir_stats = None
                    continue
            todo.extend(reversed(subdirs))  # depth first, in name order: a stable prefix
            self.seen = seen
            if seen >= max_entries:
                self.truncated = self.truncated or bool(todo)
                return

    def _hash_racy(self, paths):
        budget = RACY_HASH_BYTES
        for path in paths:
            size, mtime_ns, ctime_ns = self.files[path]
            if self.dir_stats is not None and _is_racy(max(mtime_ns, ctime_ns), self.started_ns):
                self.dir_stats = None
            if _is_racy(mtime_ns, self.started_ns) and size <= budget:
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


def _is_racy(mtime_ns, snapshot_ns):
    """Whether a file with this mtime may be rewritten unseen (same size and mtime) after a
    snapshot taken at snapshot_ns: its content is hashed then."""
    return mtime_ns >= snapshot_ns - RACY_NS


def _dir_id(st):
    """What changes when a directory's entries do (mtime, ctime), or it is another one."""
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def changes(before, after, paths=None):
    """What the execute_reply metadata says about the files between two snapshots:
    {"files": [{"name", "size"}], "files_deleted": [names], "files_truncated": bool},
    both lists sorted by name and at most MAX_LISTED long. paths: the only paths that may
    differ between the two (a Tracker's), or None for any."""
    changed = []
    if paths is None:
        items = after.files.items()
        gone = before.files
    else:
        items = [(p, after.files[p]) for p in paths if p in after.files]
        gone = [p for p in paths if p in before.files]
    for path, (size, mtime_ns, ctime_ns) in items:
        old = before.files.get(path)
        if old is None:
            # Unseen before: new, unless the first walk stopped before reaching it.
            if before.truncated and ctime_ns < before.started_ns - RACY_NS:
                continue
        elif old[:2] == (size, mtime_ns):
            digest = before.digests.get(path)
            if digest is None or _digest(os.path.join(after.root, path)) == digest:
                continue
        changed.append(_entry(path, size))
    # Gone from the second walk: deleted, unless that walk stopped before reaching it.
    deleted = [p for p in gone if p not in after.files
               and not (after.truncated and after.exists(p))]
    changed.sort(key=lambda f: f["name"])
    deleted = sorted(_shown(p)[0] for p in deleted)
    return {
        "files": changed[:MAX_LISTED],
        "files_deleted": deleted[:MAX_LISTED],
        "files_truncated": (before.truncated or after.truncated or len(changed) > MAX_LISTED
                            or len(deleted) > MAX_LISTED),
    }


def _shown(name):
    """(name as JSON can carry it, whether that is the name itself): a name that is not
    UTF-8 (here with surrogate escapes) shows each such byte as \\xNN, as kenneld's lists do."""
    try:
        name.encode("utf-8")
        return name, True
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace"), False


def _entry(path, size):
    name, exact = _shown(path)
    return {"name": name, "size": size} if exact else {"name": name, "size": size, "utf8": False}


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


# inotify, from <sys/inotify.h>.
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED, _IN_ISDIR = 0x4000, 0x8000, 0x40000000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_EXCL_UNLINK = 0x1000000, 0x2000000, 0x4000000
_WATCH = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO
          | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR
          | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_BYTES = 1 << 16


def _libc_inotify():
    """libc's (inotify_init1, inotify_add_watch, inotify_rm_watch), or None. Made at import,
    in the zygote, so that kernels share them rather than each build its own."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        calls = (libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch)
    except (OSError, AttributeError):
        return None
    c_int = ctypes.c_int
    argtypes = [(c_int,), (c_int, ctypes.c_char_p, ctypes.c_uint32), (c_int, c_int)]
    for call, args in zip(calls, argtypes):
        call.argtypes, call.restype = args, c_int
    return calls


_INOTIFY = _libc_inotify()


class _Lost(Exception):
    """The tracker can no longer vouch for what it holds. owned: whether the descriptor it
    holds is still its own to close."""

    def __init__(self, why, owned=True):
        super().__init__(why)
        self.owned = owned


def _walk_order(path):
    """Where a walk lists path: a directory's files, by name, before its subdirectories."""
    parts = path.split("/")
    return [(1, p) for p in parts[:-1]] + [(0, parts[-1])]


class Tracker:
    """Snapshots of one workspace, kept current by inotify (see the module's docstring).
    snapshot() gives what Snapshot(root) would, and the paths that may differ from the
    previous snapshot (None after a walk: any). Files with more than one name are re-read
    every time (a write through another name raises no event here). What no event shows: a
    write through a shared memory mapping (mmap) after the file's last write() or close, and
    a write to a file through a second name it was given where no watch sees (a hidden
    directory, __pycache__, past a bound) while it had only one here."""

    def __init__(self, root, max_entries=MAX_ENTRIES, max_depth=MAX_DEPTH,
                 watch_from=WATCH_FROM):
        self.root = root
        self.max_entries = max_entries
        self.max_depth = max_depth
        self.watch_from = watch_from
        self.walks = 0  # times it set up watching from a walk (the first, and after a loss)
        self._fd = -1
        self._walk_only = 0  # snapshots left to take by walking, after a failed start
        self._walked = None  # the last small workspace's walk (or its revalidation)
        self._reset()

    def _reset(self):
        self._root_id = None  # (st_dev, st_ino) of root while watched
        self._files = {}  # as Snapshot.files; replaced, never changed, once handed out
        self._racy = set()  # paths whose mtime was recent (or ahead) when last seen
        self._linked = set()  # paths with more than one hard link
        self._inodes = {}  # path -> inode number, for every file held
        self._dirs = {}  # watch descriptor -> directory ("" or "a/b/")
        self._wds = {}  # directory -> watch descriptor
        self._counts = {}  # directory -> its entries, as a walk counts them
        self._entries = 0  # their sum, against max_entries

    def snapshot(self):
        """(a Snapshot of the workspace now, the paths that may differ from the previous
        snapshot, or None for any)."""
        if self._fd >= 0:
            try:
                return self._sync()
            except _Lost as e:
                self.close(owned=e.owned)
            except OSError:
                self.close()
        if self._walk_only > 0:
            self._walk_only -= 1
            return Snapshot(self.root, self.max_entries, self.max_depth), None
        if self.watch_from > 0:
            walked, self._walked = self._walked, None
            if walked is not None:
                snap = self._revalidate(walked)
                if snap is not None:
                    self._walked = snap
                    return snap, None
            snap = Snapshot(self.root, self.max_entries, self.max_depth, stat_dirs=True)
            if snap.seen < self.watch_from or snap.truncated or snap.seen >= self.max_entries:
                if snap.seen < self.watch_from and not snap.truncated:
                    self._walked = snap
                return snap, None  # small enough to walk, or at a bound: walks say the same
        snap = self._start()
        if self._fd < 0:
            self._walk_only = RETRY_AFTER  # past a bound, say: watching again costs as much
        return snap, None

    def _revalidate(self, walked):
        """walked's answer again, as a new Snapshot, if a walk now must give the same; None
        if it might not. A walk lists a directory only after its stat (dir_stats): an entry
        made, removed or renamed in it since then set its mtime and ctime to the time of
        that change, so they differ now. (Unless the stat saw a change made within RACY_NS
        before the walk: within the same timestamp tick, git's "racy clean" again. Such a
        walk keeps no dir_stats, nor one with a file changed then.) A file's content, size,
        type or mode cannot change without its ctime (utime() resetting the mtime sets it
        too), nor its name without its directory's."""
        if walked.dir_stats is None:
            return None
        started_ns = time.time_ns()
        root, join = self.root, os.path.join
        try:
            for rel, ident in walked.dir_stats.items():
                if _dir_id(os.stat(join(root, rel))) != ident:
                    return None
            for path, (size, mtime_ns, ctime_ns) in walked.files.items():
                st = os.lstat(join(root, path))
                if (st.st_size, st.st_mtime_ns, st.st_ctime_ns) != (size, mtime_ns, ctime_ns):
                    return None
        except OSError:
            return None
        return Snapshot.known(root, started_ns, walked.files, walked.seen, walked.dir_entries,
                              walked.linked, walked.inodes, walked.dir_stats)

    def close(self, owned=True):
        """owned=False: the descriptor's number may be user code's now; leave it alone."""
        if self._fd >= 0 and owned:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = -1
        self._reset()

    # ---- the first walk -------------------------------------------------------------------

    def _start(self):
        self.close()
        self.walks += 1
        fd = _INOTIFY[0](os.O_NONBLOCK | os.O_CLOEXEC) if _INOTIFY else -1
        if fd < 0:
            return Snapshot(self.root, self.max_entries, self.max_depth)
        self._fd = fd
        try:
            # High, where user code's own descriptors do not land unless it means to: the
            # number is read before every use (_sync), but another inotify would pass.
            soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, max(3, min(soft, 1 << 16) // 2))
            os.close(fd)
            self._fd = high
            self._root_id = _identity(self.root)
            # Each directory is watched before it is listed: a change after its listing
            # raises an event, one before it is in the listing.
            snap = Snapshot(self.root, self.max_entries, self.max_depth, on_dir=self._watch)
        except (_Lost, OSError):
            self.close()
            return Snapshot(self.root, self.max_entries, self.max_depth)
        if snap.truncated or "" not in self._wds or snap.seen >= self.max_entries:
            self.close()  # at a bound (or no workspace): walks from now on say the same
            return snap
        self._counts, self._entries = snap.dir_entries, snap.seen
        self._files = snap.files
        self._linked = snap.linked
        self._inodes = snap.inodes
        self._racy = {p for p, (_, mtime_ns, _) in snap.files.items()
                      if _is_racy(mtime_ns, snap.started_ns)}
        return snap

    def _watch(self, rel):
        # No trailing slash: with IN_DONT_FOLLOW a symlink put where a directory was is
        # refused (IN_ONLYDIR), never followed.
        path = os.path.join(self.root, rel[:-1]) if rel else self.root
        wd = _INOTIFY[1](self._fd, os.fsencode(path), _WATCH)
        if wd < 0:
            err = ctypes.get_errno()
            if err in (errno.ENOENT, errno.ENOTDIR):
                return  # gone already, or not a directory now: the walk will not list it
            raise _Lost(os.strerror(err))
        old = self._dirs.get(wd)
        if old is not None and old != rel:
            raise _Lost(f"{rel!r} is {old!r}, watched already")  # one directory, two names
        self._dirs[wd] = rel
        self._wds[rel] = wd

    # ---- later snapshots ------------------------------------------------------------------

    def _sync(self):
        # The descriptor is a number user code can close and reuse: read from it only while
        # it is still an inotify.
        try:
            target = os.readlink(f"/proc/self/fd/{self._fd}")
        except OSError:
            target = None  # closed
        if target != "anon_inode:inotify":
            raise _Lost("the inotify descriptor was closed or replaced", owned=False)
        if _identity(self.root) != self._root_id:
            raise _Lost("the workspace is another directory now")
        started_ns = time.time_ns()
        dirty, new_dirs = set(self._linked), []
        while True:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                break
            self._events(data, dirty, new_dirs)
            if len(data) < _READ_BYTES // 2:
                break  # a short read: the queue is (nearly certainly) empty
        files = self._files
        if dirty or new_dirs:
            files = dict(files)  # the previous snapshot keeps the old dict
        for rel in new_dirs:
            if rel in self._wds or not _is_dir(self.root, rel):
                continue  # walked already, or not a directory (now)
            depth = rel.count("/")
            if depth > self.max_depth:
                raise _Lost("a new directory past the depth bound")
            sub = Snapshot(self.root, self.max_entries - self._entries, self.max_depth,
                           on_dir=self._watch, start=(rel, depth))
            if sub.truncated:
                raise _Lost("new directories past the entry bound")
            self._counts.update(sub.dir_entries)
            self._entries += sub.seen
            self._linked |= sub.linked
            dirty.update(sub.files)
        todo = list(dirty)
        while todo:
            rel = todo.pop()
            parent = rel[:rel.rfind("/") + 1]
            st = None
            if parent in self._wds:  # else: in no directory a walk would list
                try:
                    st = os.lstat(os.path.join(self.root, rel))
                except (FileNotFoundError, NotADirectoryError):
                    pass
            if st is not None and stat.S_ISREG(st.st_mode):
                files[rel] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                self._inodes[rel] = st.st_ino
                if _is_racy(st.st_mtime_ns, started_ns):
                    self._racy.add(rel)
                if st.st_nlink > 1 and rel not in self._linked:
                    # A new name for a file: its other names here now change with it (and
                    # raised no event when this one was made).
                    self._linked.add(rel)
                    others = {p for p, ino in self._inodes.items()
                              if ino == st.st_ino and p not in dirty}
                    self._linked |= others
                    dirty |= others
                    todo.extend(others)
                elif st.st_nlink == 1:
                    self._linked.discard(rel)
            else:
                files.pop(rel, None)
                self._inodes.pop(rel, None)
                self._linked.discard(rel)
        if self._entries >= self.max_entries:
            raise _Lost("at the entry bound")
        self._files = files
        snap = Snapshot.known(self.root, started_ns, files, self._entries, self._counts,
                              self._linked, self._inodes)
        self._racy = {p for p in self._racy
                      if p in files and _is_racy(files[p][1], started_ns)}
        snap._hash_racy(sorted(self._racy, key=_walk_order))
        return snap, dirty

    def _events(self, data, dirty, new_dirs):
        at = 0
        while at + _EVENT.size <= len(data):
            wd, mask, _cookie, size = _EVENT.unpack_from(data, at)
            name = data[at + _EVENT.size:at + _EVENT.size + size].split(b"\0", 1)[0]
            at += _EVENT.size + size
            if mask & _IN_Q_OVERFLOW:
                raise _Lost("the inotify queue overflowed")
            rel = self._dirs.get(wd)
            if rel is None:
                continue  # a watch already dropped
            if mask & _IN_IGNORED:
                del self._dirs[wd]
                if self._wds.get(rel) == wd:
                    del self._wds[rel]
                if rel == "":
                    raise _Lost("the workspace's own watch is gone")
                continue
            if mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
                if rel == "":
                    raise _Lost("the workspace itself was moved or deleted")
                continue  # its parent's event says the same, with the name
            if not name:
                if mask & _IN_ATTRIB:
                    # A directory's mode changed: whether a walk may list it, or stat what is
                    # in it, may have too.
                    raise _Lost("a directory's attributes changed")
                continue
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                self._counts[rel] = self._counts.get(rel, 0) + 1
                self._entries += 1
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                self._counts[rel] = self._counts.get(rel, 0) - 1
                self._entries -= 1
            path = rel + os.fsdecode(name)
            if not mask & _IN_ISDIR:
                dirty.add(path)
                continue
            if mask & _IN_ATTRIB:
                raise _Lost("a directory's attributes changed")
            if name.startswith(b".") or name == b"__pycache__":
                continue  # not walked, so not watched
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                new_dirs.append(path + "/")
            elif mask & (_IN_DELETE | _IN_MOVED_FROM):
                self._forget(path + "/", dirty)

    def _forget(self, prefix, dirty):
        """A directory went (deleted, or moved away): its files are gone from here, and its
        watches, if it lives on elsewhere, stop answering for these paths."""
        dirty.update(p for p in self._files if p.startswith(prefix))
        for rel in [r for r in self._counts if r.startswith(prefix)]:
            self._entries -= self._counts.pop(rel)
        for rel in [r for r in self._wds if r.startswith(prefix)]:
            wd = self._wds.pop(rel)
            self._dirs.pop(wd, None)
            _INOTIFY[2](self._fd, wd)  # fails harmlessly if already gone


def _identity(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino


def _is_dir(root, rel):
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(root, rel[:-1])).st_mode)
    except OSError:
        return False
