"""The ledger's SQLite file: connection settings, numbered migrations, write transactions.

Owns nothing but the file's health and schema; `core.ledger` (tasks, events) and `core.leases`
(lane admission) build on it. Imports no pydantic, so the lean `laneboard exec` path stays fast.
A corrupt file or one written by a newer laneboard is refused with the file's name; nothing is
guessed and nothing is rewritten.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from laneboard.core.domain.errors import LedgerError

LEDGER_NAME = "ledger.sqlite3"
BUSY_TIMEOUT_MS = 30_000

MIGRATIONS: Sequence[str] = (
    # 1: repos, tasks, the journal, leases.
    """
    CREATE TABLE repos (
        id INTEGER PRIMARY KEY,
        common_dir TEXT NOT NULL UNIQUE,
        root TEXT NOT NULL,
        name TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TABLE tasks (
        id TEXT PRIMARY KEY,
        repo_id INTEGER NOT NULL REFERENCES repos(id),
        name TEXT NOT NULL,
        state TEXT NOT NULL,
        base_ref TEXT NOT NULL,
        base_sha TEXT NOT NULL,
        branch TEXT NOT NULL,
        branch_created_by_us INTEGER NOT NULL DEFAULT 0,
        branch_tip_at_creation TEXT,
        area TEXT NOT NULL,
        worktree_path TEXT NOT NULL,
        admin_name TEXT,
        worktree_created_by_us INTEGER NOT NULL DEFAULT 0,
        dir_dev INTEGER, dir_ino INTEGER, gitfile_dev INTEGER, gitfile_ino INTEGER,
        agent_profile TEXT,
        agent_argv TEXT,
        tmux_socket TEXT, tmux_session TEXT, tmux_window TEXT, tmux_pane TEXT,
        reviewed_sha TEXT,
        finalized_sha TEXT,
        disposition TEXT,
        retired_at REAL,
        owner_pid INTEGER,
        owner_start INTEGER,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE UNIQUE INDEX tasks_live_name ON tasks(repo_id, name) WHERE retired_at IS NULL;
    CREATE INDEX tasks_by_repo ON tasks(repo_id, created_at);
    CREATE TRIGGER tasks_never_deleted BEFORE DELETE ON tasks
        BEGIN SELECT RAISE(ABORT, 'tasks are never deleted'); END;
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT REFERENCES tasks(id),
        repo_id INTEGER REFERENCES repos(id),
        at REAL NOT NULL,
        kind TEXT NOT NULL,
        actor TEXT NOT NULL,
        data TEXT NOT NULL DEFAULT '{}'
    );
    CREATE INDEX events_by_task ON events(task_id, seq);
    CREATE TRIGGER events_append_only_update BEFORE UPDATE ON events
        BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END;
    CREATE TRIGGER events_append_only_delete BEFORE DELETE ON events
        BEGIN SELECT RAISE(ABORT, 'the journal is append-only'); END;
    CREATE TABLE leases (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        repo_id INTEGER NOT NULL REFERENCES repos(id),
        lane TEXT REFERENCES tasks(id),
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        holder_pid INTEGER NOT NULL,
        holder_start INTEGER NOT NULL,
        command TEXT NOT NULL,
        created_at REAL NOT NULL,
        admitted_at REAL,
        released_at REAL,
        release_reason TEXT
    );
    CREATE INDEX leases_active ON leases(state) WHERE state != 'released';
    CREATE TABLE snapshots (
        task_id TEXT NOT NULL REFERENCES tasks(id),
        n INTEGER NOT NULL,
        ref TEXT NOT NULL,
        sha TEXT NOT NULL,
        created_at REAL NOT NULL,
        PRIMARY KEY (task_id, n)
    );
    """,
    # 2: what lane admission needs across processes.
    """
    ALTER TABLE leases ADD COLUMN child_pid INTEGER;
    ALTER TABLE leases ADD COLUMN child_start INTEGER;
    ALTER TABLE leases ADD COLUMN wake TEXT;
    ALTER TABLE leases ADD COLUMN wait_reason TEXT;
    ALTER TABLE leases ADD COLUMN admit_order INTEGER;
    ALTER TABLE leases ADD COLUMN repo_cap INTEGER;
    ALTER TABLE leases ADD COLUMN exit_code INTEGER;
    CREATE INDEX leases_by_admission ON leases(admit_order) WHERE admit_order IS NOT NULL;
    """,
    # 3: a lease follows its command's process group (or session) after the command exits.
    """
    ALTER TABLE leases ADD COLUMN pgid INTEGER;
    ALTER TABLE leases ADD COLUMN sid INTEGER;
    """,
    # 4: a repository is found again after it moves: its common dir's device/inode and root
    # commit survive a `mv`.
    """
    ALTER TABLE repos ADD COLUMN common_dev INTEGER;
    ALTER TABLE repos ADD COLUMN common_ino INTEGER;
    ALTER TABLE repos ADD COLUMN root_commit TEXT;
    """,
    # 5: the branch a task will be integrated into, recorded at creation.
    """
    ALTER TABLE tasks ADD COLUMN target TEXT;
    """,
    # 6: the agent runtime: the pinned conversation, what the agent was started with, the state
    # the controller last recorded; and the one controller.
    """
    ALTER TABLE tasks ADD COLUMN conversation_id TEXT;
    ALTER TABLE tasks ADD COLUMN agent_prompt TEXT;
    ALTER TABLE tasks ADD COLUMN agent_state TEXT;
    ALTER TABLE tasks ADD COLUMN agent_exit INTEGER;
    ALTER TABLE tasks ADD COLUMN agent_started_at REAL;
    ALTER TABLE tasks ADD COLUMN tmux_server_pid INTEGER;
    CREATE TABLE controller (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        pid INTEGER NOT NULL,
        start INTEGER,
        since REAL NOT NULL
    );
    """,
    # 7: review and finalize: the reviewed SHA's time, where integration moved the target,
    # leases nested in a parent lease and on lanes that are not a task's (the integration
    # lane: the table is rebuilt without the lane's reference to tasks), and the caches of
    # reviews and merges (keyed by commit ids, which never change what they name).
    """
    ALTER TABLE tasks ADD COLUMN reviewed_at REAL;
    ALTER TABLE tasks ADD COLUMN target_old TEXT;
    ALTER TABLE tasks ADD COLUMN target_new TEXT;
    ALTER TABLE tasks ADD COLUMN pr_url TEXT;
    CREATE TABLE leases_v7 (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        repo_id INTEGER NOT NULL REFERENCES repos(id),
        lane TEXT,
        kind TEXT NOT NULL,
        state TEXT NOT NULL,
        holder_pid INTEGER NOT NULL,
        holder_start INTEGER NOT NULL,
        command TEXT NOT NULL,
        created_at REAL NOT NULL,
        admitted_at REAL,
        released_at REAL,
        release_reason TEXT,
        child_pid INTEGER,
        child_start INTEGER,
        wake TEXT,
        wait_reason TEXT,
        admit_order INTEGER,
        repo_cap INTEGER,
        exit_code INTEGER,
        pgid INTEGER,
        sid INTEGER,
        parent INTEGER
    );
    INSERT INTO leases_v7 SELECT seq, repo_id, lane, kind, state, holder_pid, holder_start,
        command, created_at, admitted_at, released_at, release_reason, child_pid, child_start,
        wake, wait_reason, admit_order, repo_cap, exit_code, pgid, sid, NULL FROM leases;
    DROP TABLE leases;
    ALTER TABLE leases_v7 RENAME TO leases;
    CREATE INDEX leases_active ON leases(state) WHERE state != 'released';
    CREATE INDEX leases_by_admission ON leases(admit_order) WHERE admit_order IS NOT NULL;
    CREATE TABLE merges (
        ours TEXT NOT NULL,
        theirs TEXT NOT NULL,
        clean INTEGER NOT NULL,
        files TEXT NOT NULL,
        PRIMARY KEY (ours, theirs)
    );
    CREATE TABLE reviews (
        base TEXT NOT NULL,
        tip TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (base, tip)
    );
    """,
    # 8: whether the task's agent runs confined (bubblewrap), and why not; when the block
    # that held a lease ended while processes its command started still ran.
    """
    ALTER TABLE tasks ADD COLUMN confined INTEGER;
    ALTER TABLE tasks ADD COLUMN confine_note TEXT;
    ALTER TABLE leases ADD COLUMN ended_at REAL;
    """,
    # 9: delegation: the task that spawned this one.
    """
    ALTER TABLE tasks ADD COLUMN parent_id TEXT REFERENCES tasks(id);
    CREATE INDEX tasks_by_parent ON tasks(parent_id) WHERE parent_id IS NOT NULL;
    """,
    # 10: the random token laneboard writes into a new worktree's admin dir, part of its pinned
    # identity (a worktree re-created at the same path may get the same inodes back).
    """
    ALTER TABLE tasks ADD COLUMN admin_token TEXT;
    """,
    # 11: the merge queue: reviewed SHAs waiting to be integrated into their target, in order
    # (never deleted: an entry that leaves says why), and whether a target's queue is paused.
    """
    CREATE TABLE queue (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        repo_id INTEGER NOT NULL REFERENCES repos(id),
        task_id TEXT NOT NULL REFERENCES tasks(id),
        target TEXT NOT NULL,
        sha TEXT NOT NULL,
        state TEXT NOT NULL,
        added_at REAL NOT NULL,
        note TEXT,
        tell INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX queue_one_entry_per_task ON queue(task_id)
        WHERE state IN ('waiting', 'testing');
    CREATE TRIGGER queue_never_deleted BEFORE DELETE ON queue
        BEGIN SELECT RAISE(ABORT, 'queue entries are never deleted'); END;
    CREATE TABLE queue_paused (
        repo_id INTEGER NOT NULL REFERENCES repos(id),
        target TEXT NOT NULL,
        PRIMARY KEY (repo_id, target)
    );
    """,
    # 12: the review loop: a checkpoint of the worktree per agent turn (dropped ones keep their
    # row), and review comments anchored to a line of a reviewed SHA.
    """
    CREATE TABLE checkpoints (
        task_id TEXT NOT NULL REFERENCES tasks(id),
        n INTEGER NOT NULL,
        ref TEXT NOT NULL,
        sha TEXT NOT NULL,
        created_at REAL NOT NULL,
        turn TEXT NOT NULL,
        files INTEGER NOT NULL,
        bytes INTEGER NOT NULL,
        pinned INTEGER NOT NULL DEFAULT 0,
        dropped_at REAL,
        PRIMARY KEY (task_id, n)
    );
    CREATE TABLE comments (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        task_id TEXT NOT NULL REFERENCES tasks(id),
        path TEXT NOT NULL,
        line INTEGER NOT NULL,
        side TEXT NOT NULL,
        sha TEXT NOT NULL,
        text TEXT NOT NULL,
        line_text TEXT,
        created_at REAL NOT NULL,
        state TEXT NOT NULL,
        sent_at REAL,
        resolved_at REAL
    );
    CREATE INDEX comments_by_task ON comments(task_id, id);
    """,
    # 13: each task's git state as the controller last computed it, with what proves it fresh
    # (the watch that has seen every change since: its epoch; `gen` counts the changes it saw),
    # and the controller's watch readers ask for that proof.
    """
    CREATE TABLE git_states (
        task_id TEXT PRIMARY KEY,
        gen INTEGER NOT NULL DEFAULT 0,
        epoch TEXT,
        state TEXT,
        at REAL
    );
    CREATE TABLE watcher (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        pid INTEGER NOT NULL,
        start INTEGER,
        fences TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        since REAL NOT NULL
    );
    """,
)


def to_db(path: str) -> str | bytes:
    """A path as the ledger stores it: text when it is valid UTF-8, else its raw bytes (a BLOB;
    SQLite's TEXT must be UTF-8, and a path may be any bytes). Compare with `to_db` too."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape")
    return path


def from_db(value: str | bytes | None) -> str | None:
    """A path read back from the ledger (undecodable bytes as surrogate escapes, as
    `os.fsdecode` gives them)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    return value


def default_path() -> Path:
    """`ledger.sqlite3` in `$LANEBOARD_HOME`, else in the platform's user state dir."""
    from laneboard.core.adapters.config import state_dir

    return state_dir() / LEDGER_NAME


class Database:
    """One connection to the ledger file, in autocommit mode with explicit write transactions.

    Every laneboard process (TUI, CLI, `exec`, hooks), and every thread of one, opens its own;
    SQLite's locking and the busy timeout serialize writers across them. A `Database` belongs to
    the thread that opened it (sqlite3 refuses any other).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # One connection per thread (sqlite3 enforces it): a service used from the board's
            # worker threads opens one in each.
            self.conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        except (OSError, sqlite3.Error) as err:
            raise LedgerError(f"cannot open the ledger {path}: {err}") from None
        self.conn.row_factory = sqlite3.Row
        try:
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            self.conn.execute("PRAGMA foreign_keys = ON")
            self._check_version()
            self._use_wal()
            self._migrate()
        except sqlite3.DatabaseError as err:
            self.conn.close()
            raise LedgerError(
                f"the ledger {path} is not a usable laneboard ledger: {err}"
            ) from None
        except LedgerError:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def _use_wal(self) -> None:
        """Put the file in WAL mode (once: the mode is kept in the file). Switching takes an
        exclusive lock and SQLite answers "database is locked" at once, without its busy
        handler, when another connection opens the new file at the same moment: retry until
        the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        while True:
            mode = self.conn.execute("PRAGMA journal_mode").fetchone()[0]
            if mode.lower() == "wal":
                return
            try:
                mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as err:
                if "locked" not in str(err) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
                continue
            if mode.lower() != "wal":
                raise LedgerError(f"the ledger {self.path} cannot use WAL mode (got {mode})")
            return

    def data_version(self) -> int:
        """A number that changes when another connection commits a change to the file: a cheap
        "has anything happened?" for a reader that polls (`PRAGMA data_version`)."""
        version: int = self.conn.execute("PRAGMA data_version").fetchone()[0]
        return version

    def _check_version(self) -> int:
        version: int = self.conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise LedgerError(
                f"the ledger {self.path} has schema version {version}, newer than this laneboard "
                f"understands ({len(MIGRATIONS)}); upgrade laneboard"
            )
        return version

    def _migrate(self) -> None:
        if self._check_version() == len(MIGRATIONS):
            return
        with self.transaction() as db:
            # Re-read inside the write lock: another process may have migrated meanwhile.
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number in range(version, len(MIGRATIONS)):
                for statement in MIGRATIONS[number].split(";\n"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction: `BEGIN IMMEDIATE` takes the write lock up front, so what is read
        inside it cannot be changed by another writer before the commit."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")


def journal(
    db: sqlite3.Connection,
    *,
    task_id: str | None,
    repo_id: int | None,
    kind: str,
    actor: str,
    data: dict[str, Any],
) -> None:
    """Append one event to the journal, inside the caller's transaction."""
    db.execute(
        "INSERT INTO events (task_id, repo_id, at, kind, actor, data) VALUES (?, ?, ?, ?, ?, ?)",
        (task_id, repo_id, time.time(), kind, actor, json.dumps(data, sort_keys=True)),
    )
