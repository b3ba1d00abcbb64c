"""`laneboard ls --json --follow`: this machine's live tasks as a stream, for a board on another
machine that shows them (docs/hosts.md, "Streaming").

The stream is the board's own feed run without a screen (`tui.board.feed.Feed`): it wakes on
hook events, file changes and other processes' commits, polls tmux once per tick while a pane
lives, and, when no board or `supervise` is the controller here, becomes it (it records what
the agents do, as a board would). Each line is one JSON document:

- first `{"schema": "tasks/N", "tasks": [...], "host": {...}}`: every live task as `ls --json`
  says it, and what tells a reboot from a reconnect (`boot`: the kernel's boot id; `tmux`: when
  laneboard's tmux server here started, or null when none runs);
- then `{"tasks": [...], "gone": [ids]}` whenever tasks changed: only the tasks whose document
  changed, and the ids of those that left (retired, or no longer listed);
- `{"alive": true}` after `STREAM_HEARTBEAT` seconds with nothing else said, so that the reader can
  tell a silent host from a quiet one.

It ends when its standard input closes (the reader or its connection went away) or a write
fails; it never changes anything but what the controller records.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from laneboard.core.domain.hosts import STREAM_HEARTBEAT, STREAM_SILENT
from laneboard.tui import output

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def boot_id() -> str | None:
    """This machine's boot id (Linux), which changes at every boot; None elsewhere."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None


class Stream:
    """Writes the stream's lines (from the feed's thread and the heartbeat's), one at a time,
    straight to the file descriptor (nothing is left buffered at exit). A reader that takes
    nothing for `within` seconds (a frozen machine, a connection that hangs) ends the stream,
    as a reader that went away does: the follower never stays blocked, holding the
    controller's claim."""

    def __init__(
        self,
        out: TextIO,
        on_end: Callable[[], None],
        look: Callable[[], dict[str, Any]],
        *,
        within: float = STREAM_SILENT,
    ) -> None:
        self.fd = out.fileno()
        self.look = look
        """What the machine is (`{"boot", "tmux"}`), looked at again at most every heartbeat."""
        self._looked = 0.0
        self._mutex = threading.Lock()
        """Held while a document is made and said (the feed's thread or the heartbeat's)."""
        self.within = within
        # Non-blocking, so a full pipe is seen as such; never a terminal, whose mode its shell
        # shares (it would be left non-blocking if this process were killed).
        self._blocking = os.get_blocking(self.fd)
        if not os.isatty(self.fd):
            os.set_blocking(self.fd, False)
        self.on_end = on_end
        self.ended = threading.Event()
        self._lock = threading.Lock()
        self._said = threading.Event()
        self._shown: dict[str, str] | None = None
        self._host: dict[str, Any] = {}
        self._host_now: dict[str, Any] = {}
        self._views: dict[str, Any] = {}
        """The view each shown text was made from: the feed hands the same object again for a
        task it did not read again, whose text is then not made again."""

    def end(self) -> None:
        self.ended.set()
        self.on_end()

    def close(self) -> None:
        """Give the descriptor its mode back."""
        with contextlib.suppress(OSError):
            os.set_blocking(self.fd, self._blocking)

    def line(self, document: dict[str, Any]) -> None:
        data = memoryview((json.dumps(document, separators=(",", ":")) + "\n").encode())
        with self._lock:
            deadline = time.monotonic() + self.within
            while data and not self.ended.is_set():
                try:
                    data = data[os.write(self.fd, data) :]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.end()  # the reader takes nothing: as good as gone
                        break
                    select.select([], [self.fd], [], min(left, 1.0))
                except OSError:  # the reader went away
                    self.end()
            self._said.set()

    def _machine(self) -> dict[str, Any]:
        if time.monotonic() - self._looked > STREAM_HEARTBEAT:
            self._looked = time.monotonic()
            self._host_now = self.look()
        return self._host_now

    def tasks(self, views: list[Any]) -> None:
        """The first document, then what changed since the one before (with `host` when it
        changed: a tmux server that started, or ended, since)."""
        with self._mutex:
            self._tasks(views, self._machine())

    def _tasks(self, views: list[Any], host: dict[str, Any]) -> None:
        shown = self._shown or {}
        texts: dict[str, str] = {}
        docs: dict[str, dict[str, Any]] = {}
        for view in views:
            task_id = view.task.id
            if self._views.get(task_id) is view and task_id in shown:
                texts[task_id] = shown[task_id]
            else:
                docs[task_id] = output.task_view_json(view)
                texts[task_id] = json.dumps(docs[task_id], sort_keys=True)
        self._views = {view.task.id: view for view in views}
        if self._shown is None:
            first = {"schema": output.schema("tasks"), "tasks": list(docs.values())}
            self.line({**first, "host": host})
        else:
            changed = [docs[i] for i in docs if shown.get(i) != texts[i]]
            gone = sorted(set(shown) - set(texts))
            moved = {"host": host} if host != self._host else {}
            if changed or gone or moved:
                self.line({"tasks": changed, "gone": gone, **moved})
        self._shown, self._host = texts, dict(host)

    def heartbeat(self) -> None:
        """After each `STREAM_HEARTBEAT` with nothing said: the machine again when it changed
        (a tmux server started or ended while no task moved), else that it is alive."""
        while not self.ended.is_set():
            self._said.clear()
            if self._said.wait(STREAM_HEARTBEAT) or self.ended.is_set():
                continue
            with self._mutex:
                host = self._machine()
                if self._shown is not None and host != self._host:
                    self.line({"tasks": [], "gone": [], "host": host})
                    self._host = dict(host)
                else:
                    self.line({"alive": True})


def follow(
    service: Any,
    out: TextIO = sys.stdout,
    into: TextIO = sys.stdin,
    *,
    within: float = STREAM_SILENT,
) -> int:
    """Stream this machine's live tasks to `out` until `into` closes, or `out` fails or takes
    nothing for `within` seconds."""
    from laneboard.tui.board.feed import Feed, Update

    feed: Feed | None = None
    boot = boot_id()
    stream = Stream(
        out,
        lambda: feed.stop() if feed is not None else None,
        lambda: {"boot": boot, "tmux": service.runtime_started()},
        within=within,
    )

    def post(update: Update) -> None:
        if update.error is None:
            stream.tasks([v for board in update.snapshot.repos for v in board.tasks])

    def until_closed() -> None:
        try:
            while os.read(into.fileno(), 65536):
                pass
        except (OSError, ValueError):
            pass
        stream.end()

    feed = Feed(service, post)
    for body in (until_closed, stream.heartbeat):
        threading.Thread(target=body, daemon=True).start()
    if stream.ended.is_set():  # (its input closed before the feed was made)
        stream.close()
        return 0
    try:
        feed.run()
    finally:
        stream.ended.set()
        stream.close()
    return 0
