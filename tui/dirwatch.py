"""A watch of a fixed list of directories (not their subdirectories) that costs nothing idle.

On Linux it is inotify through libc: the watching thread blocks in `select` until the kernel
reports a change or `Stop` is set, so an idle board wakes for no watch at all. Only changes
are asked for (a write, a chmod, a create, a delete, a rename, the directory itself removed or
moved): reads are not, so an agent that greps its worktree, or a `git status`, costs the board
nothing. When the kernel's queue overflows it says so, and the batch says `OVERFLOW`: what
changed is unknown, and the caller must read everything again. Elsewhere (no inotify) it is
watchfiles' own polling loop, which cannot tell an overflow.

`batches` yields an empty batch once every watch is set up (a change made after that is
reported), then one batch per burst of changes: a burst ends when nothing more came for
`step` seconds, or `debounce` seconds after it began. A batch is a set of (kind, path) with
kind one of `ADDED`, `MODIFIED`, `DELETED` (or `OVERFLOW`, path ""). A directory that does not
exist raises `FileNotFoundError`, one that cannot be read is left out (as watchfiles does);
running out of watches raises `OSError`.

Threads: `batches` runs in the watching thread; `Stop.set` may be called from any thread, any
number of times, also after the watch ended.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import threading
import time
from collections.abc import Iterator

ADDED, MODIFIED, DELETED, OVERFLOW = "added", "modified", "deleted", "overflow"

_IN_MODIFY, _IN_ATTRIB = 0x2, 0x4
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED = 0x4000, 0x8000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
_CHANGES = (
    _IN_MODIFY | _IN_ATTRIB | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
    | _IN_DELETE_SELF | _IN_MOVE_SELF
)  # fmt: skip
_HEADER = struct.Struct("iIII")


class Stop:
    """A `threading.Event` whose `set` also wakes a watch blocked in `select`."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def set(self) -> None:
        with self._lock:
            self._event.set()
            if self._write >= 0:
                os.write(self._write, b"!")

    def is_set(self) -> bool:
        return self._event.is_set()

    def fileno(self) -> int:
        return self._read

    def close(self) -> None:
        """Close the pipe (the watch ended); `set` still works, and only sets the event."""
        with self._lock:
            for fd in (self._read, self._write):
                if fd >= 0:
                    os.close(fd)
            self._read = self._write = -1


def batches(
    dirs: list[str], stop: Stop, *, debounce: float = 0.2, step: float = 0.02
) -> Iterator[set[tuple[str, str]]]:
    """Changes in `dirs` until `stop` is set (see the module's docstring)."""
    try:
        inotify = _Inotify.open()
    except OSError:
        inotify = None
    if inotify is None:
        yield from _polled(dirs, stop, debounce, step)
        return
    try:
        for path in dirs:
            inotify.watch(path)
        yield set()
        while not stop.is_set():
            ready, _, _ = select.select([inotify.fd, stop.fileno()], [], [])
            if inotify.fd not in ready:
                continue
            batch: set[tuple[str, str]] = set()
            began = time.monotonic()
            while inotify.read(batch):
                left = began + debounce - time.monotonic()
                if left <= 0 or stop.is_set():
                    break
                ready, _, _ = select.select([inotify.fd, stop.fileno()], [], [], min(step, left))
                if inotify.fd not in ready:
                    break
            if batch:
                yield batch
    finally:
        inotify.close()


def _polled(
    dirs: list[str], stop: Stop, debounce: float, step: float
) -> Iterator[set[tuple[str, str]]]:
    import watchfiles

    kinds = {
        watchfiles.Change.added: ADDED,
        watchfiles.Change.modified: MODIFIED,
        watchfiles.Change.deleted: DELETED,
    }
    for changes in watchfiles.watch(
        *dirs,
        watch_filter=None,
        debounce=int(debounce * 1000),
        step=int(step * 1000),
        stop_event=stop,
        rust_timeout=1000,
        yield_on_timeout=True,
        recursive=False,
        raise_interrupt=False,
        ignore_permission_denied=True,
    ):
        yield {(kinds[change], path) for change, path in changes}


class _Inotify:
    """One inotify instance (non-blocking) and the directory each of its watches is of."""

    def __init__(self, fd: int, libc: ctypes.PyDLL) -> None:
        self.fd = fd
        self.libc = libc
        self.dirs: dict[int, str] = {}

    @classmethod
    def open(cls) -> _Inotify | None:
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        # `PyDLL`: a call keeps the interpreter lock. `inotify_add_watch` never blocks, and a
        # board's first watch makes thousands of them while Textual starts in the main thread:
        # a call that let the lock go would wait for that thread's switch interval to get it
        # back (measured: 0.2 s to arm 4,800 directories, against 10 ms without the wait).
        libc = ctypes.PyDLL(name, use_errno=True)
        if not hasattr(libc, "inotify_init1"):
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        return cls(fd, libc)

    def watch(self, path: str) -> None:
        mask = _CHANGES | _IN_ONLYDIR | _IN_DONT_FOLLOW | _IN_EXCL_UNLINK
        wd = self.libc.inotify_add_watch(self.fd, os.fsencode(path), mask)
        if wd >= 0:
            self.dirs[wd] = path
            return
        code = ctypes.get_errno()
        if code in (errno.EACCES, errno.EPERM):
            return  # left out, as watchfiles leaves it
        if code == errno.ENOENT:
            raise FileNotFoundError(code, os.strerror(code), path)
        raise OSError(code, os.strerror(code), path)

    def read(self, batch: set[tuple[str, str]]) -> bool:
        """Add what the kernel has queued to `batch`; whether there was anything."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return False
        at = 0
        while at + _HEADER.size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, at)
            raw = data[at + _HEADER.size : at + _HEADER.size + length]
            at += _HEADER.size + length
            if mask & _IN_Q_OVERFLOW:
                batch.add((OVERFLOW, ""))
                continue
            directory = self.dirs.get(wd)
            if directory is None:
                continue
            if mask & _IN_IGNORED:
                del self.dirs[wd]  # the directory is gone (its delete was reported before)
                continue
            name = os.fsdecode(raw.rstrip(b"\0"))
            path = os.path.join(directory, name) if name else directory
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                batch.add((ADDED, path))
            elif mask & (_IN_DELETE | _IN_MOVED_FROM | _IN_DELETE_SELF | _IN_MOVE_SELF):
                batch.add((DELETED, path))
            else:
                batch.add((MODIFIED, path))
        return bool(data)

    def close(self) -> None:
        os.close(self.fd)
