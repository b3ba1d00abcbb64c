"""The ledger: migrations, refusal of unusable files, append-only journal, shared writers."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from laneboard.core.adapters.db import LEDGER_NAME, MIGRATIONS
from laneboard.core.adapters.ledger import Ledger, NameTaken, new_task_id
from laneboard.core.domain.errors import LaneboardError, LedgerError
from laneboard.core.domain.models import Actor, TaskState


def _task_fields(repo_id: int, name: str) -> dict[str, object]:
    return {
        "id": new_task_id(),
        "repo_id": repo_id,
        "name": name,
        "state": TaskState.PROVISIONING.value,
        "base_ref": "HEAD",
        "base_sha": "0" * 40,
        "branch": f"lb/{name}/work",
        "area": "/nowhere/.worktrees",
        "worktree_path": f"/nowhere/.worktrees/{name}",
    }


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / LEDGER_NAME)


def test_new_ledger_uses_wal_foreign_keys_and_latest_schema(ledger: Ledger) -> None:
    assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert ledger.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert ledger.db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


def test_reopening_does_not_migrate_again(tmp_path: Path) -> None:
    first = Ledger(tmp_path / LEDGER_NAME)
    repo, _ = first.ensure_repo("/c", "/r", "r", Actor.CLI)
    first.close()
    second = Ledger(tmp_path / LEDGER_NAME)
    assert second.repos() == [repo]


def test_corrupt_ledger_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_NAME
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(LedgerError, match=str(path)):
        Ledger(path)
    assert path.read_bytes().startswith(b"this is not a database")


def test_newer_schema_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / LEDGER_NAME
    Ledger(path).close()
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    raw.commit()
    raw.close()
    with pytest.raises(LedgerError, match=rf"{path}.*newer"):
        Ledger(path)


def test_journal_is_append_only(ledger: Ledger) -> None:
    ledger.ensure_repo("/c", "/r", "r", Actor.CLI)
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        ledger.db.execute("UPDATE events SET kind = 'x'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        ledger.db.execute("DELETE FROM events")
    assert [e.kind for e in ledger.events()] == ["repo.registered"]


def test_tasks_are_never_deleted(ledger: Ledger) -> None:
    repo, _ = ledger.ensure_repo("/c", "/r", "r", Actor.CLI)
    ledger.insert_task(_task_fields(repo.id, "a"), Actor.CLI, {})
    with pytest.raises(sqlite3.DatabaseError, match="never deleted"):
        ledger.db.execute("DELETE FROM tasks")


def test_live_name_is_unique_but_reusable_after_retirement(ledger: Ledger) -> None:
    repo, _ = ledger.ensure_repo("/c", "/r", "r", Actor.CLI)
    first = ledger.insert_task(_task_fields(repo.id, "a"), Actor.CLI, {})
    with pytest.raises(NameTaken, match="'a' is taken"):
        ledger.insert_task(_task_fields(repo.id, "a"), Actor.CLI, {})
    ledger.update_task(first.id, actor=Actor.CLI, kind="task.failed", state=TaskState.FAILED)
    second = ledger.insert_task(_task_fields(repo.id, "a"), Actor.CLI, {})
    assert second.id != first.id
    assert ledger.find_task(repo.id, "a") == second
    assert ledger.task(first.id).disposition == "failed"


def test_update_with_stale_expectation_is_refused(ledger: Ledger) -> None:
    repo, _ = ledger.ensure_repo("/c", "/r", "r", Actor.CLI)
    task = ledger.insert_task(_task_fields(repo.id, "a"), Actor.CLI, {})
    with pytest.raises(LaneboardError, match="is provisioning, not provisioned; another process"):
        ledger.update_task(
            task.id,
            actor=Actor.CLI,
            kind="x",
            state=TaskState.PROVISIONED,
            expect=TaskState.PROVISIONED,
        )
    assert ledger.task(task.id).state is TaskState.PROVISIONING


def test_claim_is_a_compare_and_swap_on_the_owner(ledger: Ledger) -> None:
    repo, _ = ledger.ensure_repo("/c", "/r", "r", Actor.CLI)
    fields = {**_task_fields(repo.id, "a"), "owner_pid": 999999, "owner_start": 1}
    task = ledger.insert_task(fields, Actor.CLI, {})
    assert ledger.claim(task.id, 999999, 1) is True
    assert ledger.claim(task.id, 999999, 1) is False  # a second doctor saw the same dead owner


def test_many_connections_opening_a_new_ledger_at_once_all_succeed(tmp_path: Path) -> None:
    """Was broken: the switch to WAL mode answered "database is locked" at once (SQLite does not
    wait for it) when two processes opened a fresh ledger together, e.g. two shims' `exec`."""
    from laneboard.core.adapters.db import Database

    for round_ in range(40):
        path = tmp_path / f"ledger-{round_}.sqlite3"
        barrier = threading.Barrier(8)
        failures: list[BaseException] = []

        def open_once(
            path: Path = path,
            barrier: threading.Barrier = barrier,
            failures: list[BaseException] = failures,
        ) -> None:
            barrier.wait()
            try:
                Database(path).close()
            except BaseException as err:  # noqa: BLE001 - reported by the assertion below
                failures.append(err)

        threads = [threading.Thread(target=open_once) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert failures == []
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
