"""The change feed a waiting command blocks on (`laneboard wait`, the MCP server's `wait`).

A watch (`tui.dirwatch`: inotify) reports writes to the ledger's directory (its WAL changes on
every commit of any laneboard process) and to the agents' event files (a hook, `laneboard
signal`, a pane's exit).
`Feed.wait(seconds)` returns as soon as one of them was written, or when `seconds` have passed:
what finishes a task always writes one of these, so a waiter wakes on the change itself, and
the timeout only bounds how stale a screen-only judgement (an agent without hooks) can get.

One watcher thread per feed; `close` (or the `with` block's end) stops it within a second.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from laneboard.tui.dirwatch import Stop

if TYPE_CHECKING:
    from laneboard.core.service.app import Service


class Feed:
    """Wakes one waiter when any of `dirs` changes."""

    def __init__(self, dirs: list[str]) -> None:
        self._changed = threading.Event()
        self._stop = Stop()
        for directory in dirs:
            os.makedirs(directory, exist_ok=True)
        self._thread = threading.Thread(target=self._watch, args=(dirs,), daemon=True)
        self._thread.start()

    @classmethod
    def for_service(cls, service: Service) -> Feed:
        ledger, events = service.change_dirs()
        return cls([ledger, events])

    def _watch(self, dirs: list[str]) -> None:
        from laneboard.tui import dirwatch

        try:
            for changes in dirwatch.batches(dirs, self._stop, debounce=0.05):
                if changes:
                    self._changed.set()
        except (OSError, RuntimeError):
            self._changed.set()  # no watcher: the waiter's timeout paces it
        finally:
            self._stop.close()

    def wait(self, seconds: float) -> None:
        """Block until something changed since the last call, or `seconds` passed."""
        self._changed.wait(seconds)
        self._changed.clear()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def __enter__(self) -> Feed:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
