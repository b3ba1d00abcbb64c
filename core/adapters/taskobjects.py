"""A confined task's own object directory, and the verified move of what it holds into the
repository's common object store (DESIGN.md section 5a, "Objects").

Inside its sandbox a task's git writes new objects to `<state>/objects/<task id>`
(`GIT_OBJECT_DIRECTORY`) and reads the common store as an alternate, which is read-only to it:
it can add objects, never delete or rewrite anyone's. Outside, laneboard moves each new object
into the common store, so that your own git, the board and review see the task's commits:

- a loose object is read, inflated and hashed; only one whose content hashes to its name is
  copied (its bytes as they are, written beside and linked into place, never over an existing
  object). A file that does not hash to its name is refused and counted: planting an object
  under the name of content someone will write later (a merge result is predictable) would
  otherwise put the planter's bytes into everyone's history;
- a pack is indexed again by `git index-pack` outside, which names every object by its content.

Nothing here trusts the task's own files (`info/alternates`, an `.idx`): the objects are
read as bytes and judged by their content. `watch` does the move as objects appear (inotify), so
outside readers see a commit a moment after it is made; `move` does it once, and is called
before anything outside reads a task's objects (review, finalize, a snapshot, the end of a
sandbox). Moving is idempotent and never deletes anything from either side.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import os
import re
import secrets
import select
import stat
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from laneboard.core.adapters import safefs
from laneboard.core.domain.values import value

ORDER = {b"blob": 0, b"tree": 1, b"tag": 2, b"commit": 3}
"""The order objects found together are placed in: what others name first."""
_HEX = re.compile(r"[0-9a-f]+")
MAX_LOOSE = 512 * 1024 * 1024
"""A loose object larger than this (inflated) is left where it is (and counted refused)."""


@value(frozen=False)
class Moved:
    """What one move did."""

    objects: int = 0
    packs: int = 0
    refused: list[str] | None = None

    def __post_init__(self) -> None:
        if self.refused is None:
            self.refused = []


def directory(state: Path, task_id: str) -> Path:
    """The task's object directory (made on first use)."""
    return state / "objects" / task_id


def _hash_name(common_objects: Path) -> str:
    """The object format of the repository (`sha1`, or `sha256` with extensions.objectFormat)."""
    config = common_objects.parent / "config"
    try:
        text = config.read_text(errors="replace").lower()
    except OSError:
        return "sha1"
    return "sha256" if "objectformat = sha256" in text.replace("\t", " ") else "sha1"


def _verified(raw: bytes, name: str, algorithm: str) -> bytes | None:
    """The object's type when the loose object bytes `raw` hash to `name`; None otherwise."""
    inflater = zlib.decompressobj()
    try:
        content = inflater.decompress(raw, MAX_LOOSE + 64)
    except zlib.error:
        return None
    if inflater.unconsumed_tail or not inflater.eof:
        return None
    header, nul, _ = content.partition(b"\0")
    kind, _, size = header.partition(b" ")
    if not nul or kind not in (b"blob", b"tree", b"commit", b"tag") or not size.isdigit():
        return None
    if int(size) != len(content) - len(header) - 1:
        return None
    if hashlib.new(algorithm, content).hexdigest() != name:
        return None
    return kind


def _place(raw: bytes, target: Path) -> bool:
    """Write `raw` as `target` unless it exists (beside it, then linked: never a half object,
    never over one). True when it was written now."""
    if target.exists():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f"tmp_lb_{os.getpid()}_{threading.get_ident()}"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        os.write(fd, raw)  # not fsynced, as git writes its own loose objects by default
    finally:
        os.close(fd)
    try:
        os.link(partial, target)
    except FileExistsError:
        return False
    finally:
        os.unlink(partial)
    return True


@contextlib.contextmanager
def _opened(path: str | Path, dir_fd: int | None = None) -> Iterator[int | None]:
    """A directory of the task's, opened without following a link (None when it is not a
    real directory): everything in it is the task's to plant."""
    fd = safefs.open_dir(path, dir_fd)
    try:
        yield fd
    finally:
        if fd is not None:
            os.close(fd)


def move(objects_dir: Path, common_objects: Path, seen: set[str] | None = None) -> Moved:
    """Move every object of `objects_dir` (a task's object directory) that the common store
    lacks into it, verified (see the module). `seen` (kept by a caller that moves again and
    again) skips what was judged before. Nothing there is followed: a link, a FIFO or a device
    where an object or a directory should be is passed over."""
    done = Moved()
    algorithm = _hash_name(common_objects)
    width = 40 if algorithm == "sha1" else 64
    known = seen if seen is not None else set()
    found: list[tuple[int, str, bytes]] = []
    with _opened(objects_dir) as top:
        if top is None:
            return done
        for fan in [f for f in os.listdir(top) if len(f) == 2]:
            with _opened(fan, top) as fan_fd:
                if fan_fd is None:
                    continue
                for rest in os.listdir(fan_fd):
                    name = fan + rest
                    if len(name) != width or name in known or not _HEX.fullmatch(name):
                        continue
                    if (common_objects / fan / rest).exists():
                        known.add(name)
                        continue
                    raw = safefs.read_regular(rest, MAX_LOOSE, fan_fd)
                    kind = None if raw is None else _verified(raw, name, algorithm)
                    if raw is None or kind is None:
                        assert done.refused is not None
                        done.refused.append(name)
                        continue
                    found.append((ORDER.get(kind, 0), name, raw))
        # What a commit names is in the store before the commit is: a commit found there
        # has its trees and blobs.
        for _order, name, raw in sorted(found):
            if _place(raw, common_objects / name[:2] / name[2:]):
                done.objects += 1
            known.add(name)
        with _opened("pack", top) as packs:
            if packs is not None:
                done.packs = _move_packs(packs, common_objects, known)
    return done


def _move_packs(packs: int, common_objects: Path, known: set[str]) -> int:
    """Index each pack of the task's directory (`packs`, a directory descriptor) again in the
    common store (`git index-pack` names every object by its content and writes a fresh
    index). A pack is read only when it is a regular file."""
    moved = 0
    for name in sorted(n for n in os.listdir(packs) if n.endswith(".pack")):
        fd = safefs.open_regular(name, packs)
        if fd is None:
            continue
        try:
            info = os.fstat(fd)
            key = f"pack:{name}:{info.st_size}:{info.st_mtime_ns}"
            if key in known:
                continue
            done = subprocess.run(
                ["git", "index-pack", "--stdin", "--fix-thin"],
                stdin=fd,
                capture_output=True,
                check=False,
                env={**os.environ, "GIT_DIR": str(common_objects.parent)},
            )
        finally:
            os.close(fd)
        if done.returncode == 0:
            moved += 1
            known.add(key)
    return moved


def _mark(objects_dir: Path, began: int) -> None:
    """`info/laneboard-moved` := `began`, written through directory descriptors that follow no
    link (the task owns `info/`: a link there must not turn this write into one elsewhere; it
    is replaced by a directory, so that the task's own ref updates need not wait in vain)."""
    with _opened(objects_dir) as top:
        if top is None:
            return
        with contextlib.suppress(OSError):
            if not stat.S_ISDIR(os.stat("info", dir_fd=top, follow_symlinks=False).st_mode):
                os.unlink("info", dir_fd=top)  # the link itself, not what it names
                os.mkdir("info", 0o755, dir_fd=top)
        with _opened("info", top) as info:
            if info is None:
                return
            partial = f".laneboard-moved.{os.getpid()}.{secrets.token_hex(4)}"
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            try:
                fd = os.open(partial, flags, 0o644, dir_fd=info)
            except OSError:
                return
            try:
                os.write(fd, str(began).encode())
            finally:
                os.close(fd)
            try:
                os.replace(partial, "laneboard-moved", src_dir_fd=info, dst_dir_fd=info)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(partial, dir_fd=info)


# --- watching -------------------------------------------------------------------------------

_IN_CREATE, _IN_MOVED_TO, _IN_CLOSE_WRITE = 0x100, 0x80, 0x8
_IN_ONLYDIR = 0x01000000
_EVENTS = _IN_CREATE | _IN_MOVED_TO | _IN_CLOSE_WRITE


class Watcher:
    """Moves a task's new objects into the common store as they appear, on a thread of
    its own, until `stop()`; `stop()` makes a last full move and returns its count of refused
    objects. Falls back to a move every `poll` seconds where inotify is not available."""

    def __init__(
        self,
        objects_dir: Path,
        common_objects: Path,
        *,
        poll: float = 2.0,
        on_refused: Callable[[list[str]], None] | None = None,
        also: tuple[Path, ...] = (),
        after: Callable[[], None] | None = None,
    ) -> None:
        self.objects_dir = objects_dir
        self.common_objects = common_objects
        self.poll = poll
        self.on_refused = on_refused
        self.also = also
        """Directories whose changes also wake it (a task's ref directory, its admin dir)."""
        self.after = after
        """Called after each move (a task's new tips go to the vault)."""
        self.seen: set[str] = set()
        self.refused: set[str] = set()
        self._lock = threading.Lock()
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="taskobjects", daemon=True)
        self._after = threading.Event()
        self._stopping = threading.Event()
        self._follower = threading.Thread(target=self._follow, name="after", daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> Watcher:
        self._thread.start()
        self._follower.start()
        return self

    def move_now(self) -> Moved:
        """One pass, then its start time (ns) in `info/laneboard-moved`: a ref update inside
        waits for a pass that began after it asked (confine.SETTLE)."""
        with self._lock:
            began = time.time_ns()
            done = move(self.objects_dir, self.common_objects, self.seen)
            _mark(self.objects_dir, began)
            fresh = [n for n in done.refused or () if n not in self.refused]
            self.refused.update(fresh)
        self._after.set()  # on its own thread: a ref update waits for the move, not for this
        if fresh and self.on_refused is not None:
            self.on_refused(fresh)
        return done

    def _follow(self) -> None:
        """The `after` thread: runs `after` once for each burst of passes, until stopped."""
        while True:
            self._after.wait()
            self._after.clear()
            if self.after is not None:
                self.after()
            if self._stopping.is_set():
                return

    def stop(self) -> int:
        """Stop watching (if it started), then move once more and run `after` a last time:
        nothing is left behind."""
        if self.started:
            os.write(self._stop_write, b"!")
            self._thread.join(timeout=30)
        self.move_now()
        self._stopping.set()
        self._after.set()
        if self._follower.ident is not None:
            self._follower.join(timeout=60)
        elif self.after is not None:
            self.after()
        for fd in (self._stop_read, self._stop_write):
            os.close(fd)
        return len(self.refused)

    def _run(self) -> None:
        inotify = _Inotify.open()
        try:
            while True:
                if inotify is not None:
                    inotify.watch_tree(self.objects_dir)  # before moving: nothing slips between
                    for extra in self.also:
                        inotify.watch(extra)
                self.move_now()
                fds = [self._stop_read] + ([inotify.fd] if inotify else [])
                ready, _, _ = select.select(fds, [], [], self.poll if inotify is None else 30.0)
                if self._stop_read in ready:
                    return
                if inotify is not None and inotify.fd in ready:
                    inotify.drain()
        finally:
            if inotify is not None:
                inotify.close()


class _Inotify:
    """The few inotify calls the watcher needs, through libc (no dependency)."""

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        self.fd = fd
        self.libc = libc
        self.watched: set[str] = set()

    @classmethod
    def open(cls) -> _Inotify | None:
        name = ctypes.util.find_library("c")
        if name is None:
            return None
        libc = ctypes.CDLL(name, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        return None if fd < 0 else cls(fd, libc)

    def watch_tree(self, top: Path) -> None:
        """Watch `top` and its fan-out and pack directories (new ones as they appear)."""
        try:
            subs = [top, *(top / n for n in os.listdir(top) if len(n) == 2 or n == "pack")]
        except OSError:
            subs = [top]
        for path in subs:
            self.watch(path)

    def watch(self, path: Path) -> None:
        key = str(path)
        if key in self.watched:
            return
        if self.libc.inotify_add_watch(self.fd, os.fsencode(key), _EVENTS | _IN_ONLYDIR) >= 0:
            self.watched.add(key)

    def drain(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 65536)
            except OSError as err:
                if err.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    return
                raise
            if not data:
                return
            struct.calcsize("iIII")  # events are not parsed: any of them means "look again"

    def close(self) -> None:
        os.close(self.fd)


def pending(objects_dir: Path, common_objects: Path) -> int:
    """How many loose objects of a task's directory the common store does not have yet (names
    only, nothing read, no link followed: for a report)."""
    count = 0
    with _opened(objects_dir) as top:
        if top is None:
            return 0
        for fan in [f for f in os.listdir(top) if len(f) == 2]:
            with _opened(fan, top) as fan_fd:
                if fan_fd is not None:
                    names = os.listdir(fan_fd)
                    count += sum(1 for n in names if not (common_objects / fan / n).exists())
    return count
