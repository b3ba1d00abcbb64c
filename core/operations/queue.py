"""The merge queue (DESIGN.md section 7, docs/review.md): reviewed SHAs integrated into their
target in batches, the gate run once on a batch's top, bisected when it fails.

`add` puts a reviewed task in line: exactly its reviewed SHA, refused when its branch moved
since review (`steps.integration.plan_publish`). `run` takes the integration lane and works
through each target's line, one batch at a time, with finalize's own steps
(`steps.integration.Integration`), so every guarantee of a finalize holds for each task:

1. the batch is the first `finalize.queue_batch` waiting entries; each is checked as a finalize
   would check it (a task that changed, or whose agent runs again, goes back to review with the
   reason) and gets finalize's intent (`finalizing`, owned by this process) before anything else;
2. under the integration lane, the members are merged one after another onto the target's tip
   (`git merge-tree`, no checkout), each keeping its own merge or squash commit, each result
   journalled on its task before anything can point at it. A member that conflicts with the
   target goes back to review with the files named; one that conflicts only with a member
   before it is left for the next batch (it goes back in line, first);
3. the gate runs once, on the top. Red: the batch is bisected (the gate on the middle prefix,
   then the half that holds the failure), so the culprit, the first task whose prefix fails, is
   found in ⌈log2 n⌉ more runs; the prefix before it lands, the culprit goes back to review
   with the gate's output in its journal, and the tasks after it go back in line;
4. the target moves by compare-and-swap from the tip the batch was built on to the (passing)
   top, or a clean root that has it checked out is fast-forwarded; a target that moved
   meanwhile makes the batch be built again on its new tip, once. Then each member lands
   (anchor, `finalized`), in order.

A crash at any step leaves tasks `finalizing` that `doctor --fix` settles as it settles a
finalize (the target contains a member's journalled result: it landed; else it is back in
review), and `reconcile` puts their entries back in line or marks them landed. A queue can be
paused (it stops after the batch in progress) and cancelled (paused, every waiting entry
removed). A rebase strategy integrates one task per batch: each replay needs its own worktree.

Length: about 480 lines, past the ~400 the others keep to, on purpose: a batch's steps (claim,
merge in order, gate and bisect, move, land, put back) are one ordered sequence whose every exit
must leave each member landed or back in line, and that is checked by reading them in one place.
"""

from __future__ import annotations

import os
from typing import Any

from laneboard.core.adapters import faults, procs
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.mergequeue import QueueStore
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError, describe
from laneboard.core.domain.lanes import INTEGRATION_LANE, LeaseKind
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.queue import (
    EntryState,
    QueueEntry,
    QueueReport,
    longest_passing_prefix,
)
from laneboard.core.domain.runtime import Runtime
from laneboard.core.domain.values import value
from laneboard.core.operations.steps import integration
from laneboard.core.operations.steps.integration import Integration, Plan, Stopped
from laneboard.core.operations.steps.setup import failure


def admit(ctx: RepoContext, task: Task, into: str | None) -> tuple[str, str]:
    """The target and SHA the task would wait in line with. Refused, changing nothing, when it
    is not reviewed, its branch moved since review, it has uncommitted files, or its target is
    missing or its own branch."""
    reviewed = integration.plan_publish(ctx, task)
    target = (into or task.target or "").removeprefix("refs/heads/")
    if not target:
        raise LaneboardError(f"{task.name} has no target branch: give --into BRANCH")
    if ctx.git.branch_tip(target) is None:
        raise LaneboardError(f"target branch {target!r} does not exist in {ctx.root}")
    if target == task.branch:
        raise LaneboardError(f"{task.name}: cannot integrate branch {target} into itself")
    return target, reviewed


def add(
    ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, *, into: str | None, tell: bool
) -> QueueEntry:
    """Put the reviewed task at the end of its target's line (see `admit`)."""
    target, reviewed = admit(ctx, task, into)
    try:
        return QueueStore(ledger.database).add(
            ctx.repo.id, task.id, target, reviewed, actor, tell=tell
        )
    except LaneboardError as err:
        raise LaneboardError(f"{task.name}: {err}") from None


def remove(ledger: Ledger, task: Task, actor: Actor) -> QueueEntry:
    """Take a waiting task out of line (its entry stays, `removed`)."""
    store = QueueStore(ledger.database)
    entry = store.of_task(task.id)
    if entry is None:
        raise LaneboardError(f"{task.name} is not in the merge queue")
    if entry.state is EntryState.TESTING:
        raise LaneboardError(
            f"{task.name} is in the batch being integrated now; it lands or comes back to "
            "review when the batch ends"
        )
    removed = store.move(entry, EntryState.REMOVED, actor, note="taken out of the queue")
    if removed is None:
        raise LaneboardError(f"{task.name}: its queue entry changed meanwhile; look again")
    return removed


def pause(ctx: RepoContext, ledger: Ledger, targets: list[str], actor: Actor, paused: bool) -> None:
    """Pause (or resume) the queues of `targets`: a run stops after the batch in progress."""
    store = QueueStore(ledger.database)
    for target in targets:
        store.set_paused(ctx.repo.id, target, paused, actor)


def cancel(ctx: RepoContext, ledger: Ledger, targets: list[str], actor: Actor) -> list[QueueEntry]:
    """Pause the queues of `targets` and take every waiting entry out; a batch in progress ends
    as it would. Returns the entries removed."""
    pause(ctx, ledger, targets, actor, True)
    store = QueueStore(ledger.database)
    removed: list[QueueEntry] = []
    for entry in store.active(ctx.repo.id):
        if entry.target in targets and entry.state is EntryState.WAITING:
            done = store.move(entry, EntryState.REMOVED, actor, note="the queue was cancelled")
            if done is not None:
                removed.append(done)
    return removed


def reconcile(ledger: Ledger, store: QueueStore, repo_id: int, actor: Actor) -> None:
    """Bring entries in line with their tasks: an entry `testing` whose batch is over (its task
    finalized, or back in review, by a stop, a crash settled by `doctor --fix`) is `landed` or
    back in line; a waiting entry whose task retired or changed since it was queued leaves.
    A task still `finalizing` is left alone (its batch runs, or doctor settles it first)."""
    for entry in store.active(repo_id):
        task = ledger.task(entry.task_id)
        if task.state is TaskState.FINALIZING:
            continue
        if task.state is TaskState.FINALIZED:
            if task.finalized_sha == entry.sha:
                store.move(entry, EntryState.LANDED, actor, data={"found": True})
            else:
                store.move(entry, EntryState.RETURNED, actor, note="finalized another SHA")
        elif not task.live:
            store.move(entry, EntryState.REMOVED, actor, note=f"the task is {task.state.value}")
        elif task.reviewed_sha != entry.sha:
            why = f"reviewed again since it was queued (queued {entry.sha[:12]}); queue it again"
            store.move(entry, EntryState.RETURNED, actor, note=why)
        elif entry.state is EntryState.TESTING:
            store.move(entry, EntryState.WAITING, actor, note="its batch ended before it landed")


def run(
    ctx: RepoContext,
    ledger: Ledger,
    runtime: Runtime,
    actor: Actor,
    *,
    target: str | None = None,
) -> QueueReport:
    """Integrate the repo's waiting entries (of `target`, or of every target), batch after
    batch, until none waits or every queue left is paused. Stops, with what it did so far in
    the report, when a batch neither lands nor returns anything (its target kept moving)."""
    store = QueueStore(ledger.database)
    report = QueueReport()
    reconcile(ledger, store, ctx.repo.id, actor)
    while True:
        waiting = [
            e
            for e in store.active(ctx.repo.id, target)
            if e.state is EntryState.WAITING and not store.paused(ctx.repo.id, e.target)
        ]
        report.paused[:] = sorted(
            {
                e.target
                for e in store.active(ctx.repo.id, target)
                if store.paused(ctx.repo.id, e.target)
            }
        )
        if not waiting:
            return report
        aim = waiting[0].target
        size = (
            1 if ctx.settings.finalize.strategy == "rebase" else ctx.settings.finalize.queue_batch
        )
        batch = Batch(ctx, ledger, runtime, actor, store, aim, report)
        if not batch.run([e for e in waiting if e.target == aim][:size]):
            return report


@value
class Link:
    """One member of a batch as merged: its integration, the commit it was merged onto and the
    commit that results (the target's tip once it and every member before it landed)."""

    run: Integration
    entry: QueueEntry
    onto: str
    result: str


@value(frozen=False)
class Batch:
    """One batch of one target's line, on the terms of its members' intents."""

    ctx: RepoContext
    ledger: Ledger
    runtime: Runtime
    actor: Actor
    store: QueueStore
    target: str
    report: QueueReport

    def run(self, entries: list[QueueEntry]) -> bool:
        """Integrate `entries` as one batch. True when it made progress (something landed or
        went back to review), so the line moves on."""
        report = self.report
        before = len(report.landed) + len(report.returned)
        members = self._claim(entries)
        if not members:
            return len(report.landed) + len(report.returned) > before
        report.batches += 1
        runs = [
            (Integration(self.ctx, self.ledger, task, plan, self.actor), e)
            for task, plan, e in members
        ]
        names = ", ".join(run.task.name for run, _ in runs)
        for run, _ in runs:
            run.label = f"laneboard: merge queue batch into {self.target}: {names}"
        command = ["laneboard", "queue", "run", "--target", self.target]
        try:
            with self.ctx.lane(self.ledger, INTEGRATION_LANE, LeaseKind.INTEGRATE, command) as held:
                for run, _ in runs:
                    run.held = held
                self._attempts(runs)
        except BaseException as err:
            # Interrupted or failed unexpectedly: the journal and the disk say what landed.
            self._settle_all(runs, describe(err))
            raise
        return len(report.landed) + len(report.returned) > before

    # --- the members ---------------------------------------------------------------------------

    def _claim(self, entries: list[QueueEntry]) -> list[tuple[Task, Plan, QueueEntry]]:
        """Each entry checked as finalize checks a task, then moved into the batch (`testing`)
        and its task given finalize's intent. An entry that fails a check goes back to review
        with the reason; one another process took is skipped."""
        ctx, ledger = self.ctx, self.ledger
        old = ctx.git.branch_tip(self.target)
        claimed: list[tuple[Task, Plan, QueueEntry]] = []
        for entry in entries:
            task = ledger.task(entry.task_id)
            try:
                chosen = integration.plan(
                    ctx,
                    ledger,
                    task,
                    self.runtime,
                    into=entry.target,
                    strategy=ctx.settings.finalize.strategy,
                )
                if chosen.reviewed != entry.sha:
                    raise LaneboardError(
                        f"{task.name} was reviewed again since it was queued "
                        f"({entry.sha[:12]}); queue it again"
                    )
            except LaneboardError as err:
                self._returned(entry, task, str(err))
                continue
            testing = self.store.move(entry, EntryState.TESTING, self.actor)
            if testing is None:
                continue  # another run took it
            task = ledger.update_task(
                task.id,
                actor=self.actor,
                kind="finalize.intent",
                state=TaskState.FINALIZING,
                expect=task.state,
                data={
                    "mode": "merge",
                    "queue": testing.seq,
                    "reviewed": chosen.reviewed,
                    "target": chosen.target,
                    "target_old": old,
                    "strategy": chosen.strategy,
                    "into_root": chosen.checkout == str(ctx.root),
                    "checkout": chosen.checkout,
                    "scratch": str(integration.scratch_path(task)),
                },
            )
            claimed.append((task, chosen, testing))
        faults.checkpoint("queue.after_intents")
        return claimed

    def _attempts(self, runs: list[tuple[Integration, QueueEntry]]) -> None:
        """Build the batch on the target's tip, gate it, move the target; once more from the new
        tip when the target moved meanwhile."""
        for attempt in (1, 2):
            self.ctx.git.refresh()
            old = self.ctx.git.branch_tip(self.target)
            assert old is not None
            chain = self._chain(runs, old, attempt)
            if not chain:
                return
            runs = [(link.run, link.entry) for link in chain]
            passing = len(chain)
            culprit: dict[str, Any] | None = None
            if self.ctx.settings.gate:
                passing, culprit = self._gate(chain)
            top = chain[passing - 1].result if passing else old
            lead = chain[0].run
            if passing == 0 or lead.move(old, top):
                self._land(chain[:passing])
                if culprit is not None:
                    self._culprit(chain[passing], culprit)
                    self._requeue(chain[passing + 1 :], "it came after the batch's culprit")
                return
            for link in chain:
                link.run.journal("finalize.target_moved", {"expected": old, "attempt": attempt})
        self._requeue(
            [Link(run, entry, "", "") for run, entry in runs],
            f"target {self.target} moved twice while the batch was integrated",
        )

    def _chain(
        self, runs: list[tuple[Integration, QueueEntry]], old: str, attempt: int
    ) -> list[Link]:
        """Merge the members one after another onto `old`. A member that conflicts with the
        target goes back to review; one that conflicts only with members before it waits for
        the next batch."""
        chain: list[Link] = []
        onto = old
        for run, entry in runs:
            try:
                result = run.compute(onto)
            except Stopped as stop:
                alone = stop if onto == old else self._conflict_with(run, old)
                if alone is not None:
                    run.stop(alone)
                    self._returned(self._testing(entry), run.task, str(alone), stopped=True)
                else:
                    before = ", ".join(link.run.task.name for link in chain)
                    files = f" in {', '.join(stop.files)}" if stop.files else ""
                    self._requeue(
                        [Link(run, entry, onto, onto)],
                        f"it conflicts with {before}{files} (integrated first); it is next",
                    )
                continue
            run.journal(
                "finalize.result",
                {"old": onto, "new": result, "attempt": attempt, "queue": entry.seq},
            )
            chain.append(Link(run, entry, onto, result))
            onto = result
        faults.checkpoint("queue.after_results")
        return chain

    def _conflict_with(self, run: Integration, old: str) -> Stopped | None:
        """Why the member cannot be merged onto the target's tip itself, or None when it can."""
        try:
            run.compute(old)
        except Stopped as stop:
            return stop
        return None

    # --- the gate ------------------------------------------------------------------------------

    def _gate(self, chain: list[Link]) -> tuple[int, dict[str, Any] | None]:
        """Gate the top; on red, bisect. Returns how many members pass (a prefix) and, when one
        failed, the journal data of the gate run that failed on the culprit's prefix."""
        lead = chain[0].run
        data = lead.gate_run(chain[-1].result)
        self.report.gate_runs += 1
        if data["exit_code"] == 0:
            return len(chain), None
        failed: dict[int, dict[str, Any]] = {len(chain): data}

        def passes(prefix: int) -> bool:
            seen = lead.gate_run(chain[prefix - 1].result)
            self.report.gate_runs += 1
            if seen["exit_code"] != 0:
                failed[prefix] = seen
            return bool(seen["exit_code"] == 0)

        passing = longest_passing_prefix(len(chain), passes)
        faults.checkpoint("queue.after_bisect")
        return passing, failed[passing + 1]

    # --- outcomes ------------------------------------------------------------------------------

    def _land(self, links: list[Link]) -> None:
        """The target is at the last link's result: each member lands, in order."""
        for link in links:
            link.run.finish((link.onto, link.result))
            self.store.move(self._testing(link.entry), EntryState.LANDED, self.actor)
            self.report.landed.append(link.run.task.name)
            faults.checkpoint("queue.after_land")

    def _culprit(self, link: Link, data: dict[str, Any]) -> None:
        """The first member whose prefix fails the gate: back to review with the gate's
        output in its journal."""
        why = f"the gate failed with it in the batch: {failure(data)}"
        link.run.stop(Stopped(f"{link.run.task.name}: {why}"))
        self._returned(
            self._testing(link.entry),
            link.run.task,
            why,
            stopped=True,
            data={"log": data["log"], "output": data["output"], "sha": data["sha"]},
        )

    def _returned(
        self,
        entry: QueueEntry,
        task: Task,
        why: str,
        *,
        stopped: bool = False,
        data: dict[str, Any] | None = None,
    ) -> None:
        """The entry leaves the queue back to review (its task already is, when `stopped`)."""
        self.store.move(entry, EntryState.RETURNED, self.actor, note=why, data=data)
        self.report.returned.append((task.name, why))
        if entry.tell:
            self.report.told.append((task.id, why))

    def _requeue(self, links: list[Link], why: str) -> None:
        """Members that did nothing wrong go back in line, first, their tasks back to review
        with the reason; nothing of theirs landed."""
        for link in links:
            task = self.ledger.task(link.run.task.id)
            if task.state is TaskState.FINALIZING:
                link.run.drop_own_scratch()
                self.ledger.update_task(
                    task.id,
                    actor=self.actor,
                    kind="queue.deferred",
                    state=TaskState.READY_FOR_REVIEW,
                    settled=True,
                    data={"reason": why},
                )
            self.store.move(self._testing(link.entry), EntryState.WAITING, self.actor, note=why)
            self.report.deferred.append((task.name, why))

    def _testing(self, entry: QueueEntry) -> QueueEntry:
        """The entry as it is now (it was moved to `testing` when claimed)."""
        return self.store.entry(entry.seq)

    def _settle_all(self, runs: list[tuple[Integration, QueueEntry]], reason: str) -> None:
        """After an interruption: settle each member still `finalizing` as a finalize would be
        (landed when the target holds its result), then bring the entries in line."""
        for run, _ in runs:
            task = self.ledger.task(run.task.id)
            if task.state is not TaskState.FINALIZING or task.owner_pid != os.getpid():
                continue
            try:
                integration.settle(self.ctx, self.ledger, task, self.actor, reason=reason)
            except LaneboardError:
                continue  # `doctor --fix` finishes it
        reconcile(self.ledger, self.store, self.ctx.repo.id, self.actor)


def running(ledger: Ledger, repo_id: int) -> list[Task]:
    """Tasks of the repo in a batch now (`finalizing` for the queue, their owner alive)."""
    store = QueueStore(ledger.database)
    found: list[Task] = []
    for entry in store.active(repo_id):
        if entry.state is not EntryState.TESTING:
            continue
        task = ledger.task(entry.task_id)
        owner = task.owner_pid
        if task.state is TaskState.FINALIZING and owner and procs.alive(owner, task.owner_start):
            found.append(task)
    return found


def gate_estimate(ledger: Ledger, tasks: list[Task]) -> float | None:
    """How long the gate took lately (the median of the last runs journalled on `tasks`), for
    a time-left estimate; None when it never ran."""
    seconds = sorted(
        float(e.data["seconds"])
        for task in tasks
        for e in ledger.events(task.id)[-50:]
        if e.kind in ("gate.passed", "gate.failed") and "seconds" in e.data
    )
    return seconds[len(seconds) // 2] if seconds else None
