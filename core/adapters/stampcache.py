"""Facts derived from files, remembered across processes with the stamps that prove them.

A short command (`ls`, `show`, a hook) starts a new process each time, so what one process
learned (where a repository's root is, what its settings say) is lost with it unless kept on
disk. A `StampCache` keeps each fact under a key with the stamps (`core.adapters.filestamp`) of
every file it was derived from, taken before the fact was computed. A later process trusts the
fact only when every stamp is the same again. A caller stores a fact only when all its files
had settled (`filestamp.settled`) before it was computed, as it does for what it remembers in
its own process, so a write in the same clock tick as the computation can never hide behind an
unchanged stamp.

Storage: one JSON file per cache in the state dir's `cache/`, replaced whole (write to a
temporary file, then rename): a reader sees the old file or the new one, never half of one.
Writers race by design: the last rename wins and an entry another process added meanwhile is
simply computed again next time. The file is a cache only: it can be deleted at any time, and
one that cannot be read or written makes every lookup a miss, never an error.

Ownership: only laneboard outside any sandbox writes the state dir (a confined agent cannot
reach it), so an entry is trusted as laneboard wrote it; its stamps still must match.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from laneboard.core.adapters.filestamp import Stamp

LIMIT = 512
"""Entries kept per cache (the oldest go first): far more repositories than one machine has."""


class StampCache:
    """One named cache in `directory` (the state dir's `cache/`), read once per process."""

    def __init__(self, directory: Path, name: str) -> None:
        self.path = directory / f"{name}.json"
        self._entries: dict[str, Any] | None = None

    def _read(self) -> dict[str, Any]:
        try:
            loaded = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            return {}
        return loaded if isinstance(loaded, dict) else {}

    def get(self, key: str, stamps_of: Callable[[Any], Sequence[Stamp]]) -> Any:
        """The fact kept under `key` when `stamps_of(fact)`, the stamps of the files it was
        derived from taken now, are the ones kept with it; else None. (The files may depend
        on the fact: a repository's git dir is part of what discovery found.)"""
        if self._entries is None:
            self._entries = self._read()
        entry = self._entries.get(key)
        if not isinstance(entry, list) or len(entry) != 2:
            return None
        kept, found = entry
        try:
            now = _plain(stamps_of(found))
        except (TypeError, ValueError, IndexError, KeyError):
            return None  # not the shape this version keeps: a miss
        return found if kept == now else None

    def put(self, key: str, stamps: Sequence[Stamp], found: Any) -> None:
        """Keep `found` (JSON-able, not None) under `key`, derived from files whose `stamps`
        the caller proved settled (`filestamp.settled`) when the computation started."""
        entries = self._read()
        entries.pop(key, None)
        entries[key] = [_plain(stamps), found]
        while len(entries) > LIMIT:
            entries.pop(next(iter(entries)))
        self._entries = entries
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(entries))
            os.replace(temporary, self.path)
        except OSError:  # only a cache: the next process computes the fact again
            with contextlib.suppress(OSError):
                temporary.unlink()


_SHARED: dict[tuple[str, str], StampCache] = {}


def shared(name: str) -> StampCache:
    """The cache `name` in the state dir (`$LANEBOARD_HOME` or the platform's), one object
    per name and state dir in a process."""
    from laneboard.core.adapters.config import state_dir  # config keeps its settings here too

    directory = state_dir() / "cache"
    key = (str(directory), name)
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = StampCache(directory, name)
    return found


def _plain(stamps: Sequence[Stamp]) -> list[list[int] | None]:
    """Stamps as JSON gives them back (lists, not tuples), for comparison with a kept entry."""
    return [list(s) if s is not None else None for s in stamps]
