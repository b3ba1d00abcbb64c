"""Stamps of files, to tell a long-running process that what it read from them still holds.

A stamp is what `lstat` says of a path (device, inode, mode, size, change and modification
times), or None when nothing is there. The same stamp twice means the file was not written,
replaced, created or removed in between, with one exception the kernel's coarse clock makes:
a write in the same clock tick as the first read leaves the times as they were. So a stamp is
only trusted once `SETTLED` seconds have passed since the file last changed (`settled`); until
then the caller reads the file again each time, as git treats a "racily clean" index entry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

Stamp = tuple[int, int, int, int, int, int] | None

SETTLED = 1.0
"""Seconds since a file last changed before its stamp proves it unchanged (the kernel's
file-time clock moves in ticks of a few milliseconds; a second is far past any tick)."""


def stamp(path: str | os.PathLike[str], *, follow: bool = False) -> Stamp:
    """The stamp of `path` (`follow`: of what a symlink there points to)."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (
        info.st_dev,
        info.st_ino,
        info.st_mode,
        info.st_size,
        info.st_mtime_ns,
        info.st_ctime_ns,
    )


def settled(stamps: Iterable[Stamp], now: float | None = None) -> bool:
    """Whether every file stamped last changed at least `SETTLED` seconds before `now`."""
    limit = ((time.time() if now is None else now) - SETTLED) * 1e9
    return all(s is None or max(s[4], s[5]) < limit for s in stamps)
