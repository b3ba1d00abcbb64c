"""The service's merge queue (`core.operations.queue`, docs/review.md), mixed into `Service` so
the command line and the board call the same methods.

Adding checks every named task before it adds any: a refused `queue add` changes nothing. A
run integrates batch after batch in the calling thread; its gate's output goes to `on_output`
as it comes, and a wait for the integration lane to `on_wait`. Landed tasks' worktrees are
cleaned up as after a finalize; a task that went back to review and was added with `tell` has
its agent told why (typed into it when it runs, else resumed with it as its prompt).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from laneboard.core.adapters.leases import Cancel
from laneboard.core.adapters.mergequeue import QueueStore
from laneboard.core.domain.agents import AgentState, State
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Task
from laneboard.core.domain.queue import (
    ACTIVE,
    EntryState,
    QueueEntry,
    QueueLine,
    QueueReport,
    QueueView,
)
from laneboard.core.domain.views import Outcome
from laneboard.core.service.parts import OnOutput, OnWait, RepoRef, ServicePart

if TYPE_CHECKING:
    from laneboard.core.adapters.repo import RepoContext
    from laneboard.core.domain.models import Repo

TELL_WAIT = 60.0
"""How long telling an agent waits for it to be idle (after a resume, its start-up)."""


class QueueCommands(ServicePart):
    """`queue add/ls/remove/run/pause/resume/cancel`; `Service` provides the lookups."""

    if TYPE_CHECKING:

        def _clean_up(
            self, repo: Repo, task: Task, *, on_wait: OnWait, cancel: Cancel | None
        ) -> Outcome: ...
        def agent_state(self, task: Task) -> State | None: ...
        def resume(self, where: RepoRef, task: str) -> Outcome: ...

    def queue_add(
        self, where: RepoRef, names: list[str], *, into: str | None = None, tell: bool = False
    ) -> list[tuple[Task, QueueEntry]]:
        """Put the named reviewed tasks at the end of their target's line, in the order given;
        every one is checked before any is added."""
        from laneboard.core.operations import queue

        ctx = self._open(where)
        tasks = [self._live(ctx, name) for name in names]
        if len({t.id for t in tasks}) != len(tasks):
            raise LaneboardError("a task is named twice")
        store = QueueStore(self._ledger().database)
        for task in tasks:
            queue.admit(ctx, task, into)
            if store.of_task(task.id) is not None:
                raise LaneboardError(f"{task.name}: it is in the merge queue already")
        return [
            (task, queue.add(ctx, self._ledger(), task, self.actor, into=into, tell=tell))
            for task in tasks
        ]

    def queue_remove(self, where: RepoRef, names: list[str]) -> list[QueueEntry]:
        """Take the named waiting tasks out of line."""
        from laneboard.core.operations import queue

        ctx = self._open(where)
        tasks = [self._find(ctx, name) for name in names]
        store = QueueStore(self._ledger().database)
        for task in tasks:
            entry = store.of_task(task.id)
            if entry is None or entry.state is not EntryState.WAITING:
                why = "is not in the merge queue" if entry is None else "is in the batch now"
                raise LaneboardError(f"{task.name} {why}")
        return [queue.remove(self._ledger(), task, self.actor) for task in tasks]

    def queue(self, where: RepoRef, *, all_entries: bool = False) -> QueueView:
        """The repository's queue: each target's line in order (with `all_entries`, the
        entries that left it too, newest last), paused targets, the gate under way."""
        return self.queue_of(self._open(where).repo.id, all_entries=all_entries)

    def queue_of(self, repo_id: int, *, all_entries: bool = False) -> QueueView:
        """`queue` of a repository by its id, from the ledger alone (what the board reads on
        every refresh)."""
        from laneboard.core.operations import queue

        ledger = self._ledger()
        store = QueueStore(ledger.database)
        entries = store.history(repo_id) if all_entries else store.active(repo_id)
        places: dict[str, int] = {}
        lines: list[QueueLine] = []
        for entry in entries:
            position = None
            if entry.state in ACTIVE:
                places[entry.target] = places.get(entry.target, 0) + 1
                position = places[entry.target]
            lines.append(QueueLine(entry, ledger.task(entry.task_id).name, position))
        started = None
        for task in queue.running(ledger, repo_id):
            gate = ledger.last_event(task.id, "gate.started")
            intent = ledger.last_event(task.id, "finalize.intent")
            if gate is not None and intent is not None and gate.seq > intent.seq:
                ended = (
                    ledger.last_event(task.id, "gate.passed"),
                    ledger.last_event(task.id, "gate.failed"),
                )
                if not any(e is not None and e.seq > gate.seq for e in ended):
                    started = gate.at
        if not lines and started is None:
            return QueueView((), tuple(store.paused_targets(repo_id)))
        recent = [ledger.task(e.task_id) for e in store.history(repo_id)[-20:]]
        return QueueView(
            tuple(lines),
            tuple(store.paused_targets(repo_id)),
            started,
            queue.gate_estimate(ledger, recent),
        )

    def queue_run(
        self,
        where: RepoRef,
        *,
        target: str | None = None,
        on_wait: OnWait = None,
        cancel: Cancel | None = None,
        on_output: OnOutput = None,
    ) -> tuple[QueueReport, list[str]]:
        """Integrate the waiting entries batch after batch (see `core.operations.queue`).
        Returns the report and notes: worktrees kept after landing, agents told."""
        from laneboard.core.operations import queue

        ctx = self._open(where, on_wait=on_wait, cancel=cancel, on_output=on_output)
        ledger = self._ledger()
        report = queue.run(ctx, ledger, self.runtime, self.actor, target=target)
        notes: list[str] = []
        for name in report.landed:
            landed = self._find(ctx, name)
            done = self._clean_up(ctx.repo, landed, on_wait=on_wait, cancel=cancel)
            notes.extend(done.notes)
        for task_id, why in report.told:
            notes.append(self._tell(ctx, ledger.task(task_id), why))
        return report, notes

    def _tell(self, ctx: RepoContext, task: Task, why: str) -> str:
        """Tell a task's agent why it is back in review: typed into it when it runs, else it is
        resumed first and told once it is idle. Returns a note for the operator."""
        text = (
            f"laneboard's merge queue sent this task back to review: {why}. "
            "Fix it and commit; the operator reviews it again."
        )
        state = self.agent_state(self._ledger().task(task.id))
        runs = state is not None and state.state not in (AgentState.EXITED, AgentState.LOST)
        try:
            if not runs:
                self.resume(ctx.repo.id, task.id)
            self.send(ctx.repo.id, task.id, text, when_idle=True, timeout=TELL_WAIT)
        except LaneboardError as err:
            return f"{task.name}: its agent could not be told ({err})"
        return f"{task.name}: its agent was {'told' if runs else 'resumed and told'} why"

    def queue_pause(self, where: RepoRef, *, target: str | None, paused: bool) -> list[str]:
        """Pause (or resume) the queue of `target`, or of every target with entries (and, to
        resume, every paused one). Returns the targets."""
        from laneboard.core.operations import queue

        ctx = self._open(where)
        targets = self._targets(ctx, target, paused)
        queue.pause(ctx, self._ledger(), targets, self.actor, paused)
        return targets

    def queue_cancel(self, where: RepoRef, *, target: str | None) -> list[QueueEntry]:
        """Pause the queue(s) and take every waiting entry out; a batch under way ends."""
        from laneboard.core.operations import queue

        ctx = self._open(where)
        return queue.cancel(ctx, self._ledger(), self._targets(ctx, target, True), self.actor)

    def _targets(self, ctx: RepoContext, target: str | None, paused: bool) -> list[str]:
        if target is not None:
            return [target.removeprefix("refs/heads/")]
        store = QueueStore(self._ledger().database)
        found = {e.target for e in store.active(ctx.repo.id)}
        if not paused:
            found |= set(store.paused_targets(ctx.repo.id))
        if not found:
            found = {ctx.git.integration_branch(ctx.settings.target) or ""} - {""}
        return sorted(found)
