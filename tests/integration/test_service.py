"""The application service as the board will use it: from worker threads at once, with plain
values in and domain values out, refusals as data, cancellable waits, reads that write nothing,
and a change feed that follows tasks and lanes from one cursor."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from pathlib import Path

import pytest

from laneboard.core.domain.cleanup import BlockerKind, Refused
from laneboard.core.domain.lanes import LeaseState
from laneboard.core.domain.models import TaskState
from laneboard.core.domain.views import BoardSnapshot, Outcome, TaskView
from laneboard.core.service.app import Cancel, Service, UnknownTask
from tests.conftest import git
from tests.procs import exec_agent


@pytest.fixture
def service() -> Service:
    return Service()


def _ledger_file() -> Path:
    return Path(os.environ["LANEBOARD_HOME"]) / "ledger.sqlite3"


def test_inputs_are_plain_values_and_outputs_domain_values(repo: Path, service: Service) -> None:
    done = service.new(repo, "a", base="HEAD")
    assert isinstance(done, Outcome) and done.task.state is TaskState.PROVISIONED
    by_path = service.task(repo, "a")
    by_id = service.task(done.repo.id, done.task.id)
    by_prefix = service.task(str(repo / ".worktrees" / "a"), done.task.id[:5])
    assert by_path.task.id == by_id.task.id == by_prefix.task.id
    assert isinstance(by_path, TaskView) and by_path.git is not None and by_path.git.clean
    with pytest.raises(UnknownTask, match="no task named 'nope'"):
        service.task(repo, "nope")


def test_two_worker_threads_use_the_service_at_once(repo: Path, service: Service) -> None:
    """Was broken: one connection shared across threads raised "cannot start a transaction
    within a transaction" when two workers met."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def work(name: str) -> None:
        try:
            barrier.wait()
            service.new(repo, name)
            for _ in range(5):
                service.tasks(repo)
                service.lanes(repo)
            service.retain(repo, name)
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)
        finally:
            service.close()

    threads = [threading.Thread(target=work, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(v.task.name for v in service.tasks(repo)) == ["a", "b"]
    assert {v.task.state for v in service.tasks(repo)} == {TaskState.RETAINED}


def test_a_refusal_carries_its_blockers_as_data(repo: Path, service: Service) -> None:
    service.new(repo, "t")
    worktree = repo / ".worktrees" / "t"
    (worktree / "notes.md").write_text("work\n")
    git(repo, "worktree", "lock", "--reason", "mine", str(worktree))
    with pytest.raises(Refused) as refused:
        service.discard(repo, "t")
    blockers = {(b.kind, b.subject, b.lifted_by_snapshot) for b in refused.value.blockers}
    assert blockers == {
        (BlockerKind.LOCKED, None, False),
        (BlockerKind.UNTRACKED, "notes.md", True),
    }
    assert refused.value.details == [
        "locked: mine",
        "untracked file: notes.md [--force saves this]",
        "fix: `git worktree unlock` it once nothing needs it locked",
    ]
    assert service.discard_preview(repo, "t") == refused.value.blockers


def test_a_wait_for_a_lane_is_cancelled_from_another_thread(repo: Path, service: Service) -> None:
    service.new(repo, "t")
    holder = exec_agent(None, repo)  # holds the root lane
    try:
        holder.expect(r"^ready ")
        cancel = Cancel()
        waiting = threading.Event()
        outcome: list[BaseException | Outcome] = []

        def discard() -> None:
            try:
                outcome.append(
                    service.discard(repo, "t", on_wait=lambda _: waiting.set(), cancel=cancel)
                )
            except BaseException as err:  # noqa: BLE001 - inspected below
                outcome.append(err)
            finally:
                service.close()

        worker = threading.Thread(target=discard)
        worker.start()
        assert waiting.wait(timeout=30)
        cancel.cancel()
        worker.join(timeout=10)
        assert not worker.is_alive(), "cancel did not stop the wait promptly"
        assert type(outcome[0]).__name__ == "Cancelled"
        assert service.task(repo, "t").task.state is TaskState.PROVISIONED
        assert all(x.kind.value != "remove" for x in _active(service))
    finally:
        holder.send("exit 0")
        holder.close()


def _active(service: Service):  # type: ignore[no-untyped-def]
    return [
        x for _, views in service.lanes(None).repos for v in views for x in v.running + v.waiting
    ]


def _fingerprint() -> str:
    """The ledger's content, table by table (reads must not change a row)."""
    with sqlite3.connect(_ledger_file()) as db:
        rows = [
            (table, db.execute(f"SELECT * FROM {table} ORDER BY rowid").fetchall())
            for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
    return hashlib.sha256(json.dumps(rows, default=str).encode()).hexdigest()


def test_reads_write_nothing(repo: Path, service: Service) -> None:
    """Was a write: every `lanes()` read ran an admission pass."""
    service.new(repo, "a")
    agent = exec_agent("a", repo)
    try:
        agent.expect(r"^ready ")
        agent.kill_group()  # a dead holder: only a writer may reap its lease
        before = _fingerprint()
        snapshot = service.snapshot()
        service.lanes(None)
        service.tasks(None)
        service.task(repo, "a")
        service.changes(0)
        assert _fingerprint() == before
        assert isinstance(snapshot, BoardSnapshot)
        (board,) = snapshot.repos
        assert [v.task.name for v in board.tasks] == ["a"]
        lanes = {v.label: v for v in board.lanes}
        assert [x.state for x in lanes["a"].running] == [LeaseState.RUNNING]
    finally:
        agent.close()


def test_the_change_feed_follows_tasks_and_lanes_from_one_cursor(
    repo: Path, service: Service, cli
) -> None:
    start = service.snapshot().cursor
    service.new(repo, "a")
    assert cli("exec", "--lane", "a", "--", "true").code == 0
    changes = service.changes(start)
    kinds = [e.kind for e in changes.events]
    assert kinds[:2] == ["repo.registered", "task.intent"]
    assert "task.provisioned" in kinds
    lease_kinds = [k for k in kinds if k.startswith("lease.")]
    assert lease_kinds[-3:] == ["lease.waiting", "lease.running", "lease.released"]
    assert changes.cursor == changes.events[-1].seq
    assert service.changes(changes.cursor).events == ()


def test_data_version_moves_when_another_connection_commits(repo: Path, service: Service) -> None:
    service.new(repo, "a")
    version = service.data_version()
    other = Service()
    other.retain(repo, "a")
    other.close()
    assert service.data_version() != version
