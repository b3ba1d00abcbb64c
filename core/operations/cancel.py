"""Cancelling a task (`laneboard cancel`): undo a task whose agent never started, keep one
whose agent did.

The line between the two is the handoff: the start's own transition to `running`, journalled
in the same transaction as the `agent.started` event that says `ownership: agent`
(`operations.agents.start`). The start launches and records under the machine's agents lock,
and a cancel decides under the same lock, so a cancel sees either a task no agent ever ran in
(it moves it to `cancelling` by compare-and-swap, which a later start refuses) or one an agent
owns (it stops the agent and keeps worktree and branch, `retained`). A live pane laneboard
launched for the task that the ledger does not record (the start was killed between launch and
record) counts as a started agent: its files are kept.

A task still `provisioning` belongs to the process provisioning it: a cancel asks
(`cancel.requested` in the journal), and that process stops at its next step or within a
quarter second of its setup command, and rolls back to `cancelled`. When that process is dead,
the cancel finishes the rollback itself, as `doctor --fix` would.

Removal is the rollback of provisioning (`steps.undo`): exactly what the task created
goes, anything someone wrote there is saved in a snapshot first, and a worktree that anything
`discard` would refuse for and a snapshot cannot save (a process inside, a non-rebuildable
ignored file) is not removed: the cancel is refused and nothing changes.
"""

from __future__ import annotations

import signal
import time

from laneboard.core.adapters import faults, locks, procs
from laneboard.core.adapters.git import worktree_list
from laneboard.core.adapters.leases import LeaseStore, leftovers
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.process import signal_each
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import Runtime, pane_of, same_pane
from laneboard.core.operations.steps.blockers import unsafe
from laneboard.core.operations.steps.cancelling import (
    ANSWERED,
    NOT_STARTED,
    REQUESTED,
    STARTED,
    cancel_requested,
    ever_started,
)
from laneboard.core.operations.steps.recovery import by_path, interrupted_provisioning
from laneboard.core.operations.steps.stopping import retain_now, unrecorded_panes
from laneboard.core.operations.steps.undo import undo_cancel

WAIT_STEP = 0.1
"""How often a cancel looks whether the provisioning process has stopped."""


def cancel(
    ctx: RepoContext,
    ledger: Ledger,
    runtime: Runtime,
    task: Task,
    actor: Actor,
    *,
    timeout: float | None = None,
) -> Task:
    """Cancel `task`: `cancelled` with exactly its creations removed when no agent has started,
    `retained` with everything kept when one has. Returns the task as it ends; a task already
    retained, or retired, is returned as it is. `timeout` bounds the wait for a provisioning
    process to stop (None: as long as it lives)."""
    end = None if timeout is None else time.monotonic() + timeout
    while True:
        with locks.held("agents"):
            now = ledger.task(task.id)
            if now.state in NOT_STARTED:
                if ever_started(ledger, now):  # queued again after an agent ran in it
                    return _keep(ledger, runtime, now, actor, "an agent worked in it before")
                if _launched_unrecorded(runtime, now):
                    return _keep(ledger, runtime, now, actor, "an agent was launched for it")
                _refuse_unsafe(ctx, ledger, now, runtime)
                now = ledger.update_task(
                    now.id,
                    actor=actor,
                    kind="cancel.intent",
                    data={"path": now.worktree_path, "branch": now.branch},
                    state=TaskState.CANCELLING,
                    expect=now.state,
                )
            elif now.state in STARTED:
                return _keep(ledger, runtime, now, actor, "its agent had started")
        if now.state is TaskState.CANCELLING:
            faults.checkpoint("cancel.after_intent")
            return undo_cancel(ctx, ledger, now, actor)
        if now.state is not TaskState.PROVISIONING:
            return now  # retained already, or retired: nothing to cancel
        if not cancel_requested(ledger, now.id):
            ledger.append_event(now.id, now.repo_id, REQUESTED, actor, {})
        if now.owner_pid is None or not procs.alive(now.owner_pid, now.owner_start):
            _take_over_provisioning(ctx, ledger, runtime, now, actor)
            continue
        if end is not None and time.monotonic() > end:
            raise LaneboardError(
                f"{now.name}: cancel asked; process {now.owner_pid} is still provisioning it and "
                "will roll it back at its next step"
            )
        try:
            time.sleep(WAIT_STEP)  # the owner stops at its next step or setup tick
        except KeyboardInterrupt:
            # The operator stopped the cancel: the request goes with it, so that a task the
            # owner goes on to provision is not refused its agent forever.
            if ledger.task(now.id).state is TaskState.PROVISIONING:
                ledger.append_event(now.id, now.repo_id, ANSWERED, actor, {"withdrawn": True})
            raise


def _launched_unrecorded(runtime: Runtime, task: Task) -> bool:
    """A pane laneboard launched for the task that the ledger does not record, alive or dead
    (an agent that ran and exited may have written files)."""

    recorded = pane_of(task)
    return any(
        seen.task_id == task.id and not (recorded is not None and same_pane(recorded, seen))
        for seen in runtime.snapshot().values()
    )


def _keep(ledger: Ledger, runtime: Runtime, task: Task, actor: Actor, why: str) -> Task:
    """An agent has (or may have) worked in the task: stop it, keep every file (`retained`).
    Called under the agents lock."""

    for seen in unrecorded_panes(runtime.snapshot(), task):
        runtime.stop(seen.ref, timeout=5.0)
    ledger.append_event(task.id, task.repo_id, ANSWERED, actor, {"kept": True, "why": why})
    return retain_now(ledger, task, runtime, actor)


def _refuse_unsafe(ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime) -> None:
    """What removal must not go past even with a snapshot (a process inside, an ignored file
    that is not a cache): refuse the cancel, change nothing."""
    hard = unsafe(ctx, ledger, task, runtime)
    if hard:
        raise LaneboardError(
            f"{task.name}: not cancelled: "
            + "; ".join(hard)
            + f" (`laneboard discard {task.name}` says what it would do)",
        )


def _stop_orphaned_setup(ctx: RepoContext, ledger: Ledger, task: Task) -> None:
    """The provisioning process died while its setup command ran: the command's processes,
    left running, hold the task's lane. They are the cancelled setup's own (their process
    group, started after it, or carrying its lease's id): stop them, as the live owner would
    have."""

    store = LeaseStore(ledger.database, ctx.settings.lanes.slots)
    for lease in store.active(ctx.repo.id):
        if lease.lane != task.id or procs.alive(lease.holder_pid, lease.holder_start):
            continue
        signal_each(leftovers(lease, store.ledger), signal.SIGKILL)


def _take_over_provisioning(
    ctx: RepoContext, ledger: Ledger, runtime: Runtime, task: Task, actor: Actor
) -> None:
    """The provisioning process is gone: claim the task and undo what is provably its own, as
    `doctor --fix` does with a cancel asked; refused when that cannot be done."""

    _stop_orphaned_setup(ctx, ledger, task)
    entries = by_path(worktree_list(ctx.root))
    found = interrupted_provisioning(ctx, ledger, task, entries, True, actor, runtime=runtime)
    now = ledger.task(task.id)
    if now.state is TaskState.PROVISIONING:
        raise LaneboardError(f"{task.name}: not cancelled: {found.fixed or found.detail}")
