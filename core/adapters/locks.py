"""Machine-wide locks between laneboard processes, on files in the state dir (`flock`).

A lock is released when its holder closes it or dies, so a crashed process never leaves one
behind. Used where a decision and its effect must not interleave with another process's: the
agent slots (`agents.max_running`) and which process launches a task's agent.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager

from laneboard.core.adapters.config import state_dir


@contextmanager
def held(name: str) -> Iterator[None]:
    """Hold the lock `name` (blocking until it is free) for the block."""
    directory = state_dir() / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
