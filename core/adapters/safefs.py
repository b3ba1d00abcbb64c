"""Filesystem access below one directory that never follows a symbolic link below it.

Owns every read and write laneboard makes inside a worktree (snapshots, restore, provisioning
copies): each path is walked one component at a time from a directory descriptor, every
component opened with `O_NOFOLLOW`, so a symlink planted in a worktree (`docs -> /elsewhere`)
can never redirect a write, or a read, outside it (DESIGN.md section 5, "writes never follow
links"). Paths are git's: relative, `/`-separated, any bytes but NUL and `/` in a component
(strings carry undecodable bytes as surrogate escapes, as `os.fsdecode` makes them).

What stands where a directory must be is decided by the caller: `clear_links=True` (restore)
removes a symlink or file in the way, because the snapshot being written does not hold it; the
default refuses (`NotADirectoryError`), for callers that must leave the checkout as it is.
Not thread-safe: one `Below` per thread.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
CHUNK = 1 << 20


def split(relative: str) -> tuple[str, ...]:
    """The components of a git path; refuses absolute paths, `.`, `..` and empty components."""
    parts = tuple(relative.split("/"))
    if not relative or any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"not a plain relative path: {relative!r}")
    return parts


class Below:
    """Descriptor-relative access to the tree under `top` (itself opened without following a
    link). Directory descriptors are cached per directory; `close` releases them."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self._dirs: dict[tuple[str, ...], int] = {(): os.open(top, _DIR_FLAGS)}

    def close(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    def __enter__(self) -> Below:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- directories ---------------------------------------------------------------------

    def _forget(self, parts: tuple[str, ...]) -> None:
        """Drop cached descriptors of `parts` and everything below it (it was removed)."""
        for key in [k for k in self._dirs if k[: len(parts)] == parts and k]:
            os.close(self._dirs.pop(key))

    def directory(
        self, parts: tuple[str, ...], *, create: bool = False, clear_links: bool = False
    ) -> int | None:
        """A descriptor of the directory `parts` below the top, or None when it is absent (or a
        component is not a real directory) and `create` is off. With `create`, missing
        directories are made; with `clear_links`, a symlink or file where a directory must be is
        removed first, otherwise `NotADirectoryError` names it."""
        if parts in self._dirs:
            return self._dirs[parts]
        parent = self.directory(parts[:-1], create=create, clear_links=clear_links)
        if parent is None:
            return None
        name = parts[-1]
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
            os.mkdir(name, 0o777, dir_fd=parent)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        except OSError as err:
            if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if not clear_links:
                if not create:
                    return None
                raise NotADirectoryError(
                    errno.ENOTDIR, "not a real directory", str(self.top.joinpath(*parts))
                ) from None
            os.unlink(name, dir_fd=parent)
            os.mkdir(name, 0o777, dir_fd=parent)
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        self._dirs[parts] = fd
        return fd

    # --- reads ---------------------------------------------------------------------------

    def lstat(self, relative: str) -> os.stat_result | None:
        """The entry itself (a link is not followed), or None when it or a parent directory is
        absent or a parent is not a real directory."""
        parts = split(relative)
        parent = self.directory(parts[:-1])
        if parent is None:
            return None
        try:
            return os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None

    def readlink(self, relative: str) -> bytes:
        parts = split(relative)
        parent = self.directory(parts[:-1])
        if parent is None:
            raise FileNotFoundError(errno.ENOENT, "no such link", relative)
        return os.fsencode(os.readlink(parts[-1], dir_fd=parent))

    def chunks(self, relative: str) -> Iterator[bytes]:
        """The content of a regular file, in chunks; a symlink there raises (`ELOOP`)."""
        parts = split(relative)
        parent = self.directory(parts[:-1])
        if parent is None:
            raise FileNotFoundError(errno.ENOENT, "no such file", relative)
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        try:
            while chunk := os.read(fd, CHUNK):
                yield chunk
        finally:
            os.close(fd)

    # --- writes --------------------------------------------------------------------------

    def _clear(self, parent: int, parts: tuple[str, ...]) -> None:
        """Remove what stands at `parts` (a file, a link, or an empty directory)."""
        name = parts[-1]
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            self._forget(parts)
            os.rmdir(name, dir_fd=parent)  # a non-empty directory is an error, never a tree walk
        else:
            os.unlink(name, dir_fd=parent)

    def write(
        self,
        relative: str,
        content: Iterable[bytes],
        *,
        executable: bool = False,
        permissions: int | None = None,
        clear_links: bool = False,
        replace: bool = True,
    ) -> None:
        """Write a regular file at `relative` from `content`. Parents are created (see the module
        docstring for `clear_links`); whatever stands at the path itself is replaced when
        `replace`, else `FileExistsError`. The file is created anew (`O_EXCL`), never opened
        through a link. Its mode is `permissions` exactly when given, else git's: 0777 or
        0666 (as `executable` says) less the umask."""
        parts = split(relative)
        parent = self.directory(parts[:-1], create=True, clear_links=clear_links)
        assert parent is not None
        if replace:
            self._clear(parent, parts)
        mode = 0o600 if permissions is not None else (0o777 if executable else 0o666)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(parts[-1], flags, mode, dir_fd=parent)
        try:
            for chunk in content:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            if permissions is not None:
                os.fchmod(fd, permissions)
        finally:
            os.close(fd)

    def symlink(self, relative: str, target: bytes, *, clear_links: bool = False) -> None:
        """Make `relative` a symlink to `target`, replacing what stands there."""
        parts = split(relative)
        parent = self.directory(parts[:-1], create=True, clear_links=clear_links)
        assert parent is not None
        self._clear(parent, parts)
        os.symlink(os.fsdecode(target), parts[-1], dir_fd=parent)

    def remove(self, relative: str) -> bool:
        """Remove the file or link at `relative` (never a directory, never through a link).
        Returns False when there was nothing to remove."""
        parts = split(relative)
        parent = self.directory(parts[:-1])
        if parent is None:
            return False
        try:
            info = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(info.st_mode):
            return False
        os.unlink(parts[-1], dir_fd=parent)
        return True


# --- reading what an untrusted process owns ---------------------------------------------------

_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_dir(name: str | Path, dir_fd: int | None = None) -> int | None:
    """A descriptor of directory `name` (relative to `dir_fd`), never through a link; None when
    it is not a directory there."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None


def open_regular(name: str | Path, dir_fd: int | None = None) -> int | None:
    """A descriptor of the regular file `name` (relative to `dir_fd`), never through a link and
    never blocking on a FIFO or a device; None when it is anything else."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    os.set_blocking(fd, True)
    return fd


def read_regular(name: str | Path, limit: int, dir_fd: int | None = None) -> bytes | None:
    """The bytes of the regular file `name` (see `open_regular`) when it holds at most `limit`
    bytes; None otherwise."""
    fd = open_regular(name, dir_fd)
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size > limit:
            return None
        data = b""
        while len(data) <= limit and (chunk := os.read(fd, limit + 1 - len(data))):
            data += chunk
        return data if len(data) <= limit else None
    finally:
        os.close(fd)
