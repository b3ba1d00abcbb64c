"""The review loop's tables: `checkpoints` (one row per checkpoint; a dropped one keeps its row
with `dropped_at`) and `comments`. Owns every read and write of them; each change is one write
transaction that journals it in the task's journal."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from laneboard.core.adapters.db import Database, journal
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor
from laneboard.core.domain.reviewloop import Checkpoint, Comment, CommentState, Side


def _checkpoint(row: sqlite3.Row) -> Checkpoint:
    return Checkpoint(
        task_id=row["task_id"],
        n=row["n"],
        ref=row["ref"],
        sha=row["sha"],
        created_at=row["created_at"],
        turn=row["turn"],
        files=row["files"],
        bytes=row["bytes"],
        pinned=bool(row["pinned"]),
        dropped_at=row["dropped_at"],
    )


def _comment(row: sqlite3.Row) -> Comment:
    return Comment(
        id=row["id"],
        task_id=row["task_id"],
        path=row["path"],
        line=row["line"],
        side=Side(row["side"]),
        sha=row["sha"],
        text=row["text"],
        line_text=row["line_text"],
        created_at=row["created_at"],
        state=CommentState(row["state"]),
        sent_at=row["sent_at"],
        resolved_at=row["resolved_at"],
    )


class ReviewStore:
    """Checkpoints and comments of every task, over one ledger connection (its thread's)."""

    def __init__(self, database: Database) -> None:
        self.database = database

    # --- checkpoints -----------------------------------------------------------------------

    def checkpoints(self, task_id: str, *, dropped: bool = False) -> list[Checkpoint]:
        """The task's checkpoints, oldest first (with `dropped`, the dropped ones too)."""
        query = "SELECT * FROM checkpoints WHERE task_id = ?"
        if not dropped:
            query += " AND dropped_at IS NULL"
        rows = self.database.conn.execute(query + " ORDER BY n", (task_id,))
        return [_checkpoint(row) for row in rows]

    def next_number(self, task_id: str) -> int:
        row = self.database.conn.execute(
            "SELECT MAX(n) FROM checkpoints WHERE task_id = ?", (task_id,)
        ).fetchone()
        return int(row[0] or 0) + 1

    def add_checkpoint(self, found: Checkpoint, repo_id: int, actor: Actor) -> Checkpoint:
        with self.database.transaction() as db:
            db.execute(
                "INSERT INTO checkpoints (task_id, n, ref, sha, created_at, turn, files, bytes)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (found.task_id, found.n, found.ref, found.sha, found.created_at, found.turn,
                 found.files, found.bytes),
            )  # fmt: skip
            journal(
                db,
                task_id=found.task_id,
                repo_id=repo_id,
                kind="checkpoint.created",
                actor=actor,
                data={"n": found.n, "ref": found.ref, "sha": found.sha, "turn": found.turn,
                      "files": found.files, "bytes": found.bytes},
            )  # fmt: skip
        return found

    def set_checkpoint(
        self, found: Checkpoint, repo_id: int, actor: Actor, kind: str, **fields: Any
    ) -> None:
        """Change `pinned` or `dropped_at` of one checkpoint, journalled as `kind`."""
        sets = ", ".join(f"{key} = ?" for key in fields)
        with self.database.transaction() as db:
            db.execute(
                f"UPDATE checkpoints SET {sets} WHERE task_id = ? AND n = ?",
                (*fields.values(), found.task_id, found.n),
            )
            journal(
                db,
                task_id=found.task_id,
                repo_id=repo_id,
                kind=kind,
                actor=actor,
                data={"n": found.n, "ref": found.ref, **fields},
            )

    # --- comments ----------------------------------------------------------------------------

    def add_comment(
        self,
        task_id: str,
        repo_id: int,
        actor: Actor,
        *,
        path: str,
        line: int,
        side: Side,
        sha: str,
        text: str,
        line_text: str | None,
    ) -> Comment:
        with self.database.transaction() as db:
            cursor = db.execute(
                "INSERT INTO comments (task_id, path, line, side, sha, text, line_text,"
                " created_at, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (task_id, path, line, side.value, sha, text, line_text, time.time(),
                 CommentState.OPEN.value),
            )  # fmt: skip
            journal(
                db,
                task_id=task_id,
                repo_id=repo_id,
                kind="comment.added",
                actor=actor,
                data={"id": cursor.lastrowid, "path": path, "line": line, "side": side.value,
                      "sha": sha, "text": text},
            )  # fmt: skip
        return self.comment(int(cursor.lastrowid or 0))

    def comment(self, comment_id: int) -> Comment:
        row = self.database.conn.execute(
            "SELECT * FROM comments WHERE id = ?", (comment_id,)
        ).fetchone()
        if row is None:
            raise LaneboardError(f"no comment #{comment_id}")
        return _comment(row)

    def comments(self, task_id: str, *, resolved: bool = False) -> list[Comment]:
        query = "SELECT * FROM comments WHERE task_id = ?"
        if not resolved:
            query += " AND state != 'resolved'"
        rows = self.database.conn.execute(query + " ORDER BY id", (task_id,))
        return [_comment(row) for row in rows]

    def mark_comments(
        self, found: list[Comment], repo_id: int, actor: Actor, state: CommentState
    ) -> None:
        """Mark comments sent or resolved, journalled (`comment.sent`, `comment.resolved`)."""
        column = "sent_at" if state is CommentState.SENT else "resolved_at"
        now = time.time()
        with self.database.transaction() as db:
            for comment in found:
                db.execute(
                    f"UPDATE comments SET state = ?, {column} = ? WHERE id = ?",
                    (state.value, now, comment.id),
                )
                journal(
                    db,
                    task_id=comment.task_id,
                    repo_id=repo_id,
                    kind=f"comment.{state.value}",
                    actor=actor,
                    data={"id": comment.id},
                )
