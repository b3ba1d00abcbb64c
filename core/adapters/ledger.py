"""The ledger's records of repos, tasks, ownership facts and the append-only event journal.

Owns every read and write of those tables (leases belong to `core.leases`, the file and its
schema to `core.db`). Shared by every laneboard process at once (TUI, CLI, `exec`, hooks), so each
change is one `BEGIN IMMEDIATE` transaction; never a read-modify-write outside one. Nothing is
deleted: triggers make the journal append-only and forbid deleting tasks.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

from laneboard.core.adapters import procs
from laneboard.core.adapters.db import Database, default_path, from_db, journal, to_db
from laneboard.core.domain.errors import LaneboardError, LedgerError
from laneboard.core.domain.identity import Identity
from laneboard.core.domain.lifecycle import DISPOSITION_OF, OWNED, check_transition
from laneboard.core.domain.models import Actor, Disposition, Event, Repo, Task, TaskState
from laneboard.core.domain.values import value


class NameTaken(LaneboardError):
    """Another live task of the repo already has this name."""


def fields_json(fields: dict[str, Any]) -> dict[str, Any]:
    """Task fields as journal data (an identity as its four numbers)."""
    return {
        key: value.as_dict() if isinstance(value, Identity) else value
        for key, value in fields.items()
    }


class NotOwner(LaneboardError):
    """The task is in a multi-step change that another process owns."""


def new_task_id() -> str:
    """A stable task id, independent of the (reusable) name."""
    return os.urandom(6).hex()  # what secrets.token_hex does, without importing hmac


_MADE: dict[tuple[object, ...], Task] = {}
"""Tasks already made from a row, by the row's values: the board reads every task on each
refresh and most rows have not changed (a `Task` is immutable, so one is shared)."""
MADE_MOST = 8192


def _task_from_row(row: sqlite3.Row) -> Task:
    key = tuple(row)
    made = _MADE.get(key)
    if made is None:
        made = _make_task(row)
        if len(_MADE) >= MADE_MOST:
            _MADE.clear()
        _MADE[key] = made
    return made


def _make_task(row: sqlite3.Row) -> Task:
    identity = None
    if row["dir_ino"] is not None:
        identity = Identity(
            dir_dev=row["dir_dev"],
            dir_ino=row["dir_ino"],
            gitfile_dev=row["gitfile_dev"],
            gitfile_ino=row["gitfile_ino"],
            admin_token=row["admin_token"],
        )
    data = {key: row[key] for key in row.keys() if key not in Identity.FIELDS}  # noqa: SIM118
    data["identity"] = identity
    for key in PATH_COLUMNS:
        data[key] = from_db(data[key])
    data["agent_argv"] = json.loads(row["agent_argv"]) if row["agent_argv"] else None
    data["branch_created_by_us"] = bool(row["branch_created_by_us"])
    data["worktree_created_by_us"] = bool(row["worktree_created_by_us"])
    data["confined"] = None if row["confined"] is None else bool(row["confined"])
    for key in Identity.FIELDS:
        data.pop(key, None)
    data["state"] = TaskState(data["state"])
    if data["disposition"] is not None:
        data["disposition"] = Disposition(data["disposition"])
    return Task(**data)


def _repo_from_row(row: sqlite3.Row) -> Repo:
    data = dict(zip(row.keys(), row, strict=True))
    data["common_dir"], data["root"] = from_db(data["common_dir"]), from_db(data["root"])
    data["name"] = from_db(data["name"])
    return Repo(**data)


PATH_COLUMNS = ("area", "worktree_path")
"""Task columns that hold paths (stored with `core.db.to_db`)."""


@value
class RepoIdentity:
    """What survives a `mv` of a repository: its common dir's device and inode, and its root
    commit (so a new repository that happens to reuse the inode is not taken for it)."""

    dev: int
    ino: int
    root_commit: str | None


class Ledger:
    """Repos, tasks and the journal, over one `Database`.

    Not shared between threads: open one `Ledger` per thread (cheap; SQLite's own locking and the
    busy timeout serialize writers across threads and processes).
    """

    def __init__(self, path: Path | Database) -> None:
        self.database = path if isinstance(path, Database) else Database(path)
        self.path = self.database.path
        self._db = self.database.conn
        self.transaction = self.database.transaction

    @classmethod
    def open_default(cls) -> Ledger:
        return cls(default_path())

    def close(self) -> None:
        self.database.close()

    @property
    def db(self) -> sqlite3.Connection:
        """The raw connection, for reads (each statement sees a consistent snapshot)."""
        return self._db

    # --- repos ---------------------------------------------------------------------------

    def ensure_repo(
        self,
        common_dir: str,
        root: str,
        name: str,
        actor: Actor,
        identity: RepoIdentity | None = None,
    ) -> tuple[Repo, bool]:
        """The repo row for `common_dir`, created if missing. Returns (repo, created)."""
        key = to_db(common_dir)
        with self.transaction() as db:
            row = db.execute("SELECT * FROM repos WHERE common_dir = ?", (key,)).fetchone()
            if row is not None:
                return _repo_from_row(row), False
            db.execute(
                "INSERT INTO repos (common_dir, root, name, created_at, common_dev, common_ino, "
                "root_commit) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    to_db(root),
                    to_db(name),
                    time.time(),
                    identity.dev if identity else None,
                    identity.ino if identity else None,
                    identity.root_commit if identity else None,
                ),
            )
            row = db.execute("SELECT * FROM repos WHERE common_dir = ?", (key,)).fetchone()
            self._event(db, None, row["id"], "repo.registered", actor, {"root": root})
            return _repo_from_row(row), True

    def set_repo_identity(self, repo_id: int, identity: RepoIdentity) -> None:
        """Record the identity of a repo registered before identities were kept."""
        with self.transaction() as db:
            db.execute(
                "UPDATE repos SET common_dev = ?, common_ino = ?, root_commit = ? WHERE id = ?",
                (identity.dev, identity.ino, identity.root_commit, repo_id),
            )

    def repos_by_identity(self, dev: int, ino: int) -> list[Repo]:
        rows = self._db.execute(
            "SELECT * FROM repos WHERE common_dev = ? AND common_ino = ?", (dev, ino)
        )
        return [_repo_from_row(r) for r in rows]

    def relocate_repo(
        self,
        repo_id: int,
        *,
        common_dir: str,
        root: str,
        tasks: list[tuple[str, dict[str, Any]]],
        actor: Actor,
        data: dict[str, Any],
    ) -> Repo:
        """Record that a repository moved: its paths, and each live task's new paths (and
        identity, when re-pinned), with a `repo.moved` event, in one transaction."""
        with self.transaction() as db:
            db.execute(
                "UPDATE repos SET common_dir = ?, root = ? WHERE id = ?",
                (to_db(common_dir), to_db(root), repo_id),
            )
            for task_id, fields in tasks:
                values = dict(fields)
                identity = values.pop("identity", None)
                if isinstance(identity, Identity):
                    values.update(identity.as_dict())
                for key in PATH_COLUMNS:
                    if key in values:
                        values[key] = to_db(values[key])
                values["updated_at"] = time.time()
                assignments = ", ".join(f"{key} = ?" for key in values)
                db.execute(
                    f"UPDATE tasks SET {assignments} WHERE id = ?", (*values.values(), task_id)
                )
                self._event(db, task_id, repo_id, "task.relocated", actor, {**fields_json(fields)})
            self._event(db, None, repo_id, "repo.moved", actor, data)
        return self.repo(repo_id)

    def repo_by_common_dir(self, common_dir: str) -> Repo | None:
        row = self._db.execute(
            "SELECT * FROM repos WHERE common_dir = ?", (to_db(common_dir),)
        ).fetchone()
        return _repo_from_row(row) if row else None

    def repo(self, repo_id: int) -> Repo:
        row = self._db.execute("SELECT * FROM repos WHERE id = ?", (repo_id,)).fetchone()
        if row is None:
            raise LedgerError(f"the ledger {self.path} has no repo {repo_id}")
        return _repo_from_row(row)

    def repos(self) -> list[Repo]:
        return [_repo_from_row(r) for r in self._db.execute("SELECT * FROM repos ORDER BY id")]

    # --- tasks ---------------------------------------------------------------------------

    def insert_task(
        self,
        fields: dict[str, Any],
        actor: Actor,
        event: dict[str, Any],
        *,
        max_children: int | None = None,
    ) -> Task:
        """Record a new task and its `task.intent` event in one transaction (a task created in
        a multi-step state, `provisioning`, is owned by this process).

        Raises `NameTaken` when a live task of the repo has the name, including when another
        process inserted it a moment ago (the partial unique index decides, not a prior read).
        With `max_children`, a child (`fields["parent_id"]`) is refused when its parent has that
        many live children already, counted inside the same write transaction, so two spawns
        at once cannot both take the last place.
        """
        now = time.time()
        row = {**fields, "created_at": now, "updated_at": now}
        for key in PATH_COLUMNS:
            if key in row:
                row[key] = to_db(row[key])
        if TaskState(row["state"]) in OWNED and "owner_pid" not in row:
            # Born in a multi-step change: this process owns it.
            row["owner_pid"], row["owner_start"] = procs.me()
        if "agent_argv" in row and row["agent_argv"] is not None:
            row["agent_argv"] = json.dumps(row["agent_argv"])
        columns = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        try:
            with self.transaction() as db:
                parent = row.get("parent_id")
                if parent is not None and max_children is not None:
                    live = db.execute(
                        "SELECT COUNT(*) FROM tasks WHERE parent_id = ? AND retired_at IS NULL",
                        (parent,),
                    ).fetchone()[0]
                    if live >= max_children:
                        raise LaneboardError(
                            f"its parent has {live} live children, the most "
                            "`delegation.max_children` allows; finish or discard one first"
                        )
                db.execute(f"INSERT INTO tasks ({columns}) VALUES ({marks})", tuple(row.values()))
                self._event(db, row["id"], row["repo_id"], "task.intent", actor, event)
        except sqlite3.IntegrityError:
            raise NameTaken(f"task name {fields['name']!r} is taken by a live task") from None
        return self.task(row["id"])

    def task(self, task_id: str) -> Task:
        row = self._db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise LaneboardError(f"no task with id {task_id}")
        return _task_from_row(row)

    def children(self, parent_id: str, *, include_retired: bool = True) -> list[Task]:
        """The tasks `parent_id` spawned, oldest first."""
        retired = "" if include_retired else " AND retired_at IS NULL"
        rows = self._db.execute(
            f"SELECT * FROM tasks WHERE parent_id = ?{retired} ORDER BY created_at", (parent_id,)
        )
        return [_task_from_row(row) for row in rows]

    def live_task(self, repo_id: int, name: str) -> Task | None:
        row = self._db.execute(
            "SELECT * FROM tasks WHERE repo_id = ? AND name = ? AND retired_at IS NULL",
            (repo_id, name),
        ).fetchone()
        return _task_from_row(row) if row else None

    def find_task(self, repo_id: int, name: str) -> Task | None:
        """The live task with this name, else the most recent retired one."""
        row = self._db.execute(
            "SELECT * FROM tasks WHERE repo_id = ? AND name = ? "
            "ORDER BY retired_at IS NULL DESC, created_at DESC LIMIT 1",
            (repo_id, name),
        ).fetchone()
        return _task_from_row(row) if row else None

    def tasks(self, repo_id: int | None = None, *, include_retired: bool = True) -> list[Task]:
        query = "SELECT * FROM tasks WHERE (? IS NULL OR repo_id = ?)"
        if not include_retired:
            query += " AND retired_at IS NULL"
        rows = self._db.execute(query + " ORDER BY created_at, id", (repo_id, repo_id))
        return [_task_from_row(r) for r in rows]

    def tasks_by_id(self, task_ids: Collection[str]) -> list[Task]:
        """The tasks of these ids that exist (unknown ids are left out), in one query."""
        ids = list(task_ids)
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"SELECT * FROM tasks WHERE id IN ({marks})", ids)
        return [_task_from_row(r) for r in rows]

    def tasks_in_state(self, state: TaskState) -> list[Task]:
        """The tasks in `state`, oldest first."""
        rows = self._db.execute(
            "SELECT * FROM tasks WHERE state = ? ORDER BY created_at, id", (state.value,)
        )
        return [_task_from_row(r) for r in rows]

    def update_task(
        self,
        task_id: str,
        *,
        actor: Actor,
        kind: str,
        data: dict[str, Any] | None = None,
        state: TaskState | None = None,
        expect: TaskState | None = None,
        settled: bool = False,
        keep_live: bool = False,
        **fields: Any,
    ) -> Task:
        """Change a task's fields and/or state and journal it, in one transaction.

        With `state`, the lifecycle table must allow the change from the current state; with
        `expect`, the current state must be exactly that (a compare-and-swap against another
        process that moved the task meanwhile). A task in a multi-step state (`OWNED`) is changed
        only by its owner, this process: anyone else is refused with `NotOwner`, whatever the
        table allows. Entering such a state makes this process the owner; `settled` clears the
        owner: the multi-step change is over. Entering a retiring state sets the disposition
        (unless `fields` name one) and, unless `keep_live` (a finalized task whose worktree is
        still there), the retirement time, which frees the name.
        """
        if settled:  # the multi-step change is over: no process owns the task any more
            fields.update(owner_pid=None, owner_start=None)
        identity = fields.pop("identity", None)
        if isinstance(identity, Identity):
            fields.update(identity.as_dict())
        if "agent_argv" in fields and fields["agent_argv"] is not None:
            fields["agent_argv"] = json.dumps(fields["agent_argv"])
        for key in PATH_COLUMNS:
            if key in fields:
                fields[key] = to_db(fields[key])
        with self.transaction() as db:
            row = db.execute("SELECT * FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                raise LaneboardError(f"no task with id {task_id}")
            current = TaskState(row["state"])
            if expect is not None and current is not expect:
                raise LaneboardError(
                    f"task {row['name']} is {current.value}, not {expect.value}; "
                    "another process changed it"
                )
            me = procs.me()
            owner = (row["owner_pid"], row["owner_start"])
            if current in OWNED and owner != me:
                raise NotOwner(
                    f"task {row['name']} is {current.value} by process {row['owner_pid']}; "
                    "only that process (or `laneboard doctor --fix` once it is gone) may change it"
                )
            if state in OWNED and current not in OWNED:
                fields.update(owner_pid=me[0], owner_start=me[1])
            event = dict(data or {})
            if state is not None:
                check_transition(current, state)
                fields["state"] = state.value
                event.setdefault("from", current.value)
                event.setdefault("to", state.value)
                disposition = DISPOSITION_OF.get(state)
                if disposition is not None:
                    fields.setdefault("disposition", disposition.value)
                    if not keep_live:
                        fields["retired_at"] = time.time()
            fields["updated_at"] = time.time()
            assignments = ", ".join(f"{key} = ?" for key in fields)
            db.execute(f"UPDATE tasks SET {assignments} WHERE id = ?", (*fields.values(), task_id))
            self._event(db, task_id, row["repo_id"], kind, actor, event)
        return self.task(task_id)

    def claim(self, task_id: str, owner_pid: int | None, owner_start: int | None) -> bool:
        """Make this process the task's owner if the owner is still the (dead) one the caller
        saw: a compare-and-swap, so two `doctor --fix` never act on the same task at once."""
        pid, start = procs.me()
        with self.transaction() as db:
            cursor = db.execute(
                "UPDATE tasks SET owner_pid = ?, owner_start = ? "
                "WHERE id = ? AND owner_pid IS ? AND owner_start IS ?",
                (pid, start, task_id, owner_pid, owner_start),
            )
        return cursor.rowcount == 1

    # --- snapshots -----------------------------------------------------------------------

    def claim_controller(self, pid: int, start: int | None) -> int | None:
        """Become the one controller (DESIGN.md section 9): None when this process now holds
        it, else the pid of the live process that does. A holder that died is replaced."""
        with self.transaction() as db:
            row = db.execute("SELECT pid, start FROM controller WHERE id = 1").fetchone()
            if row is not None and row["pid"] != pid and procs.alive(row["pid"], row["start"]):
                holder: int = row["pid"]
                return holder
            db.execute(
                "INSERT INTO controller (id, pid, start, since) VALUES (1, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET pid = excluded.pid, start = excluded.start, "
                "since = excluded.since",
                (pid, start, time.time()),
            )
        return None

    def release_controller(self, pid: int) -> None:
        """Give the controller up, if this process holds it."""
        with self.transaction() as db:
            db.execute("DELETE FROM controller WHERE id = 1 AND pid = ?", (pid,))

    def controller(self) -> int | None:
        """The pid of the live controller, if one runs."""
        row = self.db.execute("SELECT pid, start FROM controller WHERE id = 1").fetchone()
        if row is None or not procs.alive(row["pid"], row["start"]):
            return None
        holder: int = row["pid"]
        return holder

    def add_snapshot(
        self,
        task_id: str,
        repo_id: int,
        n: int,
        ref: str,
        sha: str,
        actor: Actor,
        data: dict[str, Any],
    ) -> None:
        """Record a snapshot and journal it, in one transaction."""
        with self.transaction() as db:
            db.execute(
                "INSERT INTO snapshots (task_id, n, ref, sha, created_at) VALUES (?, ?, ?, ?, ?)",
                (task_id, n, ref, sha, time.time()),
            )
            self._event(
                db, task_id, repo_id, "snapshot.created", actor, {"ref": ref, "sha": sha, **data}
            )

    def snapshots(self, task_id: str) -> list[tuple[int, str, str]]:
        """(n, ref, sha) of the task's snapshots, oldest first."""
        rows = self._db.execute(
            "SELECT n, ref, sha FROM snapshots WHERE task_id = ? ORDER BY n", (task_id,)
        )
        return [(r["n"], r["ref"], r["sha"]) for r in rows]

    def last_event(self, task_id: str, kind: str) -> Event | None:
        """The task's most recent event of `kind`."""
        found = [e for e in self.events(task_id) if e.kind == kind]
        return found[-1] if found else None

    # --- caches of what commit ids determine ------------------------------------------------

    def cached_review(self, base: str, tip: str) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT data FROM reviews WHERE base = ? AND tip = ?", (base, tip)
        ).fetchone()
        return None if row is None else dict(json.loads(row["data"]))

    def cache_review(self, base: str, tip: str, data: dict[str, Any]) -> None:
        """Keep what the commits from `base` to `tip` hold (the pair never changes it)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO reviews (base, tip, data) VALUES (?, ?, ?)",
                (base, tip, json.dumps(data)),
            )

    def cached_merges(
        self, pairs: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[bool, list[str]]]:
        """The merges of `pairs` computed before: (ours, theirs) → (clean, conflicted files)."""
        found: dict[tuple[str, str], tuple[bool, list[str]]] = {}
        for ours, theirs in pairs:
            row = self._db.execute(
                "SELECT clean, files FROM merges WHERE ours = ? AND theirs = ?", (ours, theirs)
            ).fetchone()
            if row is not None:
                found[ours, theirs] = (bool(row["clean"]), json.loads(row["files"]))
        return found

    def cache_merges(self, found: list[tuple[str, str, bool, list[str]]]) -> None:
        with self.transaction() as db:
            db.executemany(
                "INSERT OR IGNORE INTO merges (ours, theirs, clean, files) VALUES (?, ?, ?, ?)",
                [(a, b, int(clean), json.dumps(files)) for a, b, clean, files in found],
            )

    # --- events --------------------------------------------------------------------------

    @staticmethod
    def _event(
        db: sqlite3.Connection,
        task_id: str | None,
        repo_id: int | None,
        kind: str,
        actor: Actor,
        data: dict[str, Any],
    ) -> None:
        journal(db, task_id=task_id, repo_id=repo_id, kind=kind, actor=actor.value, data=data)

    def append_event(
        self,
        task_id: str | None,
        repo_id: int | None,
        kind: str,
        actor: Actor,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Journal a side effect (or its intent) in its own transaction."""
        with self.transaction() as db:
            self._event(db, task_id, repo_id, kind, actor, data or {})

    def has_event(self, task_id: str, kinds: tuple[str, ...]) -> bool:
        """The task's journal has an event of one of `kinds`."""
        marks = ", ".join("?" for _ in kinds)
        row = self._db.execute(
            f"SELECT 1 FROM events WHERE task_id = ? AND kind IN ({marks}) LIMIT 1",
            (task_id, *kinds),
        ).fetchone()
        return row is not None

    def pending(self, task_id: str, asked: str, answered: str) -> bool:
        """The task's journal has an `asked` event with no `answered` event after it (a cancel
        request its process has not acted on yet)."""
        row = self._db.execute(
            "SELECT MAX(CASE WHEN kind = ? THEN seq END), MAX(CASE WHEN kind = ? THEN seq END) "
            "FROM events WHERE task_id = ? AND kind IN (?, ?)",
            (asked, answered, task_id, asked, answered),
        ).fetchone()
        return row[0] is not None and (row[1] is None or row[1] < row[0])

    def last_seq(self) -> int:
        """The journal's newest position (0 when it is empty)."""
        seq: int = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()[0]
        return seq

    def events(
        self, task_id: str | None = None, *, since: int = 0, limit: int | None = None
    ) -> list[Event]:
        """Events (of one task, or all) after `since`, oldest first, at most `limit`."""
        rows = self._db.execute(
            "SELECT * FROM events WHERE (? IS NULL OR task_id = ?) AND seq > ? ORDER BY seq"
            + (" LIMIT ?" if limit is not None else ""),
            (task_id, task_id, since, *((limit,) if limit is not None else ())),
        )
        return [
            Event(
                seq=r["seq"],
                task_id=r["task_id"],
                repo_id=r["repo_id"],
                at=r["at"],
                kind=r["kind"],
                actor=Actor(r["actor"]),
                data=json.loads(r["data"]),
            )
            for r in rows
        ]
