"""The merge queue's table (`queue`) and its pause flags (`queue_paused`).

Owns every read and write of them. Each change is one write transaction that also journals
the change in the task's journal, so the queue's history is the journal's. An entry is never
deleted: it leaves the queue by a state that says why. At most one active entry (waiting or
testing) per task, enforced by a unique index.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from laneboard.core.adapters.db import Database, journal
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor
from laneboard.core.domain.queue import ACTIVE, EntryState, QueueEntry

_ACTIVE = tuple(state.value for state in ACTIVE)


def _entry(row: sqlite3.Row) -> QueueEntry:
    return QueueEntry(
        seq=row["seq"],
        repo_id=row["repo_id"],
        task_id=row["task_id"],
        target=row["target"],
        sha=row["sha"],
        state=EntryState(row["state"]),
        added_at=row["added_at"],
        note=row["note"],
        tell=bool(row["tell"]),
    )


class QueueStore:
    """The queue of every repository, over one ledger connection (its thread's)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def add(
        self, repo_id: int, task_id: str, target: str, sha: str, actor: Actor, *, tell: bool
    ) -> QueueEntry:
        """Put the task at the end of its target's queue; refused when it is in line already."""
        with self.database.transaction() as db:
            try:
                cursor = db.execute(
                    "INSERT INTO queue (repo_id, task_id, target, sha, state, added_at, tell) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (repo_id, task_id, target, sha, EntryState.WAITING.value, time.time(), tell),
                )
            except sqlite3.IntegrityError:
                raise LaneboardError("it is in the merge queue already") from None
            data = {"seq": cursor.lastrowid, "target": target, "sha": sha, "tell": tell}
            journal(
                db, task_id=task_id, repo_id=repo_id, kind="queue.added", actor=actor, data=data
            )
        return self.entry(int(cursor.lastrowid or 0))

    def entry(self, seq: int) -> QueueEntry:
        row = self.database.conn.execute("SELECT * FROM queue WHERE seq = ?", (seq,)).fetchone()
        if row is None:
            raise LaneboardError(f"no queue entry #{seq}")
        return _entry(row)

    def active(self, repo_id: int | None = None, target: str | None = None) -> list[QueueEntry]:
        """Entries waiting or being tested, in queue order (of one repo, of one target)."""
        query = f"SELECT * FROM queue WHERE state IN {_ACTIVE}"
        args: list[Any] = []
        if repo_id is not None:
            query += " AND repo_id = ?"
            args.append(repo_id)
        if target is not None:
            query += " AND target = ?"
            args.append(target)
        rows = self.database.conn.execute(query + " ORDER BY seq", args)
        return [_entry(row) for row in rows]

    def history(self, repo_id: int) -> list[QueueEntry]:
        """Every entry of the repo, active or not, in the order they were added."""
        rows = self.database.conn.execute(
            "SELECT * FROM queue WHERE repo_id = ? ORDER BY seq", (repo_id,)
        )
        return [_entry(row) for row in rows]

    def of_task(self, task_id: str) -> QueueEntry | None:
        """The task's active entry, if it is in line."""
        row = self.database.conn.execute(
            f"SELECT * FROM queue WHERE task_id = ? AND state IN {_ACTIVE}", (task_id,)
        ).fetchone()
        return None if row is None else _entry(row)

    def last_of_task(self, task_id: str) -> QueueEntry | None:
        """The task's newest entry, active or not (why it left the queue)."""
        row = self.database.conn.execute(
            "SELECT * FROM queue WHERE task_id = ? ORDER BY seq DESC LIMIT 1", (task_id,)
        ).fetchone()
        return None if row is None else _entry(row)

    def move(
        self,
        entry: QueueEntry,
        state: EntryState,
        actor: Actor,
        *,
        note: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> QueueEntry | None:
        """Compare-and-swap `entry` from the state it was read in to `state`, journalled
        (`queue.<state>`). None when another process changed it first."""
        with self.database.transaction() as db:
            moved = db.execute(
                "UPDATE queue SET state = ?, note = ? WHERE seq = ? AND state = ?",
                (state.value, note, entry.seq, entry.state.value),
            ).rowcount
            if not moved:
                return None
            journal(
                db,
                task_id=entry.task_id,
                repo_id=entry.repo_id,
                kind=f"queue.{state.value}",
                actor=actor,
                data={"seq": entry.seq, "note": note, **(data or {})},
            )
        return self.entry(entry.seq)

    def paused(self, repo_id: int, target: str) -> bool:
        row = self.database.conn.execute(
            "SELECT 1 FROM queue_paused WHERE repo_id = ? AND target = ?", (repo_id, target)
        ).fetchone()
        return row is not None

    def paused_targets(self, repo_id: int) -> list[str]:
        rows = self.database.conn.execute(
            "SELECT target FROM queue_paused WHERE repo_id = ? ORDER BY target", (repo_id,)
        )
        return [row["target"] for row in rows]

    def set_paused(self, repo_id: int, target: str, paused: bool, actor: Actor) -> None:
        with self.database.transaction() as db:
            if paused:
                db.execute(
                    "INSERT OR IGNORE INTO queue_paused (repo_id, target) VALUES (?, ?)",
                    (repo_id, target),
                )
            else:
                db.execute(
                    "DELETE FROM queue_paused WHERE repo_id = ? AND target = ?", (repo_id, target)
                )
            journal(
                db,
                task_id=None,
                repo_id=repo_id,
                kind="queue.paused" if paused else "queue.resumed",
                actor=actor,
                data={"target": target},
            )
