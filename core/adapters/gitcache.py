"""Git states kept in the ledger by the controller, and the proof a reader asks for before it
uses one (docs/board.md, "Git state as a cached fact").

The controller watches every task's worktree and admin dir. Its watch thread, for every batch of
changes, first bumps the `gen` of each task the batch touched and forgets its state
(`invalidate`), then answers the fences in that batch. The controller stores a state it
computed only if no change was seen since it read the task's `gen` before running `git status`
(`store`, a compare-and-swap), stamped with the epoch of the watch that covers the task.

A reader (`ls`, `show`, a board that observes) trusts a stored state only with a proof that
nothing changed since: it makes a FIFO in the fences directory (`ask`) and waits for the
controller's watch to write its epoch into it. inotify queues the events of one watch in the
order they happened, and a write that finished before the reader made its FIFO made its event
before the FIFO's; so once the watch answers, it has seen, and invalidated, every write that
happened before the read. States of that epoch still stored are fresh. No answer (no
controller, a controller that does not watch, a stuck one) means: compute, as without a cache.

Never here: a git process, a decision about what a state means.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import sqlite3
import stat
import time
from collections.abc import Collection, Mapping
from pathlib import Path

from laneboard.core.adapters import procs
from laneboard.core.adapters.db import Database
from laneboard.core.domain.views import Commit, GitState

ANSWER_WITHIN = 0.5
"""Seconds a reader waits for the controller's watch to answer its fence before it computes
every state itself."""


def state_json(state: GitState) -> str:
    commit = state.last_commit
    return json.dumps(
        {
            "present": state.present,
            "head": state.head,
            "detached": state.detached,
            "staged": state.staged,
            "modified": state.modified,
            "untracked": state.untracked,
            "conflicted": state.conflicted,
            "ahead": state.ahead,
            "behind": state.behind,
            "last_commit": [commit.sha, commit.subject, commit.at] if commit else None,
            "problem": state.problem,
        }
    )


def state_from_json(raw: str) -> GitState:
    data = json.loads(raw)
    commit = data.pop("last_commit")
    return GitState(**data, last_commit=Commit(*commit) if commit else None)


def fingerprint() -> str:
    """What git reads outside the repository that can change a status (the system and global
    config, the global excludes file), by identity and modification time: a reader whose
    fingerprint differs from the controller's (another `HOME`, a file edited) computes."""
    home = Path(os.environ.get("HOME", "/"))
    xdg = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    paths = [
        os.environ.get("GIT_CONFIG_GLOBAL") or str(home / ".gitconfig"),
        str(xdg / "git" / "config"),
        str(xdg / "git" / "ignore"),
        "" if os.environ.get("GIT_CONFIG_NOSYSTEM") else "/etc/gitconfig",
    ]
    seen = []
    for path in paths:
        try:
            info = os.stat(path) if path else None
        except OSError:
            info = None
        seen.append(f"{path}:{info.st_ino}:{info.st_mtime_ns}:{info.st_size}" if info else path)
    return "|".join(seen)


class GitCache:
    """The `git_states` and `watcher` tables of one ledger connection."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # --- the controller ------------------------------------------------------------------

    def watching(self, fences: str) -> None:
        """This process's watch is set up and answers fences in `fences`."""
        pid, start = procs.me()
        with self.database.transaction() as db:
            db.execute(
                "INSERT INTO watcher (id, pid, start, fences, fingerprint, since) "
                "VALUES (1, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, "
                "start = excluded.start, fences = excluded.fences, "
                "fingerprint = excluded.fingerprint, since = excluded.since",
                (pid, start, fences, fingerprint(), time.time()),
            )

    def unwatching(self) -> None:
        """This process no longer watches (its states can no longer be proven)."""
        with self.database.transaction() as db:
            db.execute("DELETE FROM watcher WHERE id = 1 AND pid = ?", (os.getpid(),))

    def invalidate(self, task_ids: Collection[str]) -> None:
        """Something changed in these tasks' worktrees, admin dirs or branches: forget their
        states, and make any computation that began before now fail to store its result."""
        if not task_ids:
            return
        with self.database.transaction() as db:
            db.executemany(
                "INSERT INTO git_states (task_id, gen) VALUES (?, 1) ON CONFLICT (task_id) "
                "DO UPDATE SET gen = gen + 1, state = NULL, epoch = NULL",
                [(task_id,) for task_id in task_ids],
            )

    def generations(self, task_ids: Collection[str]) -> dict[str, int]:
        """Each task's change count now (0 when none was seen): read before `git status`."""
        found = dict.fromkeys(task_ids, 0)
        for task_id in task_ids:
            row = self.database.conn.execute(
                "SELECT gen FROM git_states WHERE task_id = ?", (task_id,)
            ).fetchone()
            if row is not None:
                found[task_id] = row["gen"]
        return found

    def store(self, task_id: str, gen: int, epoch: str, state: GitState) -> bool:
        """Keep `state`, computed after the task's change count was `gen`, as proven by the
        watch `epoch`; refused (False) when a change was seen since."""
        return task_id in self.store_all([(task_id, gen, state)], epoch)

    def store_all(self, states: list[tuple[str, int, GitState]], epoch: str) -> set[str]:
        """`store` of each (task id, change count, state), in one transaction (a board's first
        read keeps hundreds); the task ids whose state was kept."""
        now = time.time()
        kept: set[str] = set()
        with self.database.transaction() as db:
            db.executemany(
                "INSERT INTO git_states (task_id, gen, epoch, state, at) VALUES (?, 0, ?, ?, ?) "
                "ON CONFLICT (task_id) DO UPDATE SET epoch = excluded.epoch, "
                "state = excluded.state, at = excluded.at WHERE git_states.gen = ?",
                [(task_id, epoch, state_json(state), now, gen) for task_id, gen, state in states],
            )
            for task_id, gen, _state in states:
                row = db.execute(
                    "SELECT gen, epoch FROM git_states WHERE task_id = ?", (task_id,)
                ).fetchone()
                if row is not None and row["gen"] == gen and row["epoch"] == epoch:
                    kept.add(task_id)
        return kept

    def carry(self, old: str, new: str, task_ids: Collection[str]) -> None:
        """The watch `new` took over from `old` with nothing missed between them (see the
        board's feed): the states `old` proved for `task_ids` are proven by `new`."""
        with self.database.transaction() as db:
            db.executemany(
                "UPDATE git_states SET epoch = ? WHERE task_id = ? AND epoch = ?",
                [(new, task_id, old) for task_id in task_ids],
            )

    # --- a reader ------------------------------------------------------------------------

    def watcher(self) -> str | None:
        """The fences directory of the live controller's watch whose view of git's outside
        configuration is this process's too; None when there is none (then compute)."""
        try:
            row = self.database.conn.execute(
                "SELECT pid, start, fences, fingerprint FROM watcher WHERE id = 1"
            ).fetchone()
        except sqlite3.OperationalError:
            return None
        if row is None or not procs.alive(row["pid"], row["start"]):
            return None
        if row["fingerprint"] != fingerprint():
            return None
        fences: str = row["fences"]
        return fences

    def fresh(self, task_ids: Collection[str], epoch: str) -> dict[str, GitState]:
        """The stored states of `task_ids` that the watch `epoch` proves fresh (ask first)."""
        found: dict[str, GitState] = {}
        for task_id in task_ids:
            row = self.database.conn.execute(
                "SELECT state FROM git_states WHERE task_id = ? AND epoch = ? "
                "AND state IS NOT NULL",
                (task_id, epoch),
            ).fetchone()
            if row is not None:
                found[task_id] = state_from_json(row["state"])
        return found


def ask(fences: str, within: float = ANSWER_WITHIN) -> str | None:
    """Put a fence into the controller's watch and wait for its answer: the epoch of a watch
    that has seen every change made before this call, or None (no answer in time)."""
    path = os.path.join(fences, f"{os.getpid()}-{os.urandom(6).hex()}")
    try:
        os.mkfifo(path, 0o600)
    except OSError:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            end = time.monotonic() + within
            answer = b""
            while not answer.endswith(b"\n"):
                left = end - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    return None
                chunk = os.read(fd, 128)
                if not chunk:
                    return None
                answer += chunk
            return answer.decode(errors="replace").strip() or None
        finally:
            os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def answer(path: str, epoch: str) -> None:
    """Answer the fence at `path` (a reader's FIFO, still open) with `epoch`; anything else at
    that path, or a reader gone, is left alone."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.write(fd, f"{epoch}\n".encode())
    except OSError:
        pass
    finally:
        os.close(fd)


def fresh_states(database: Database, task_ids: Collection[str]) -> Mapping[str, GitState]:
    """The states of `task_ids` a live controller's watch proves fresh right now (a fence asked
    and answered); empty when there is no such controller or it did not answer in time."""
    cache = GitCache(database)
    fences = cache.watcher()
    if fences is None or not task_ids:
        return {}
    epoch = ask(fences)
    if epoch is None:
        return {}
    return cache.fresh(task_ids, epoch)
