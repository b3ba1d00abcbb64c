"""Finishing or undoing a provisioning whose process died, from the ledger and the disk alone:
what `doctor --fix` does for an interrupted `new`, and what a cancel does when the process it
asked is gone. Everything it cannot prove is the task's own is reported and left alone."""

from __future__ import annotations

import os

from laneboard.core.adapters import procs
from laneboard.core.adapters.git import WorktreeEntry
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import Runtime
from laneboard.core.domain.views import Finding
from laneboard.core.operations.steps.blockers import unsafe
from laneboard.core.operations.steps.cancelling import cancel_requested
from laneboard.core.operations.steps.created import intent, pristine, record_created
from laneboard.core.operations.steps.creation import finish
from laneboard.core.operations.steps.naming import branch_message, lock_reason
from laneboard.core.operations.steps.undo import rollback


def by_path(entries: list[WorktreeEntry]) -> dict[str, WorktreeEntry]:
    return {os.path.realpath(e.path): e for e in entries}


def interrupted_provisioning(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    entries: dict[str, WorktreeEntry],
    fix: bool,
    actor: Actor,
    runtime: Runtime | None = None,
) -> Finding:
    """Provisioning whose process died. The branch is the task's own when the ledger says so or
    its reflog names the task; the worktree when the ledger says so or git's lock carries the
    task's lock reason. `--fix` finishes a worktree that is provably the task's and pristine, and
    otherwise undoes exactly what is provably the task's, leaving everything else alone."""
    if task.owner_pid is not None and procs.alive(task.owner_pid, task.owner_start):
        return Finding(
            "provisioning-in-progress",
            f"process {task.owner_pid} is still provisioning it",
            task.name,
            task.id,
        )
    planned = intent(ledger, task)
    start = planned.get("start_sha", task.base_sha)
    entry = entries.get(os.path.realpath(task.worktree_path))
    branch_ours = task.branch_created_by_us or ctx.git.created_by(
        task.branch, branch_message(task.id)
    )
    worktree_ours = entry is not None and (
        task.worktree_created_by_us or entry.locked == lock_reason(task.id)
    )
    complete = worktree_ours and branch_ours and entry is not None and entry.branch == task.branch
    cancelled = cancel_requested(ledger, task.id)
    if complete and cancelled:
        complete = False
        detail = "provisioning was interrupted and the task was cancelled; --fix undoes it"
    elif complete:
        detail = "provisioning was interrupted after the worktree was created; --fix finishes it"
    else:
        detail = "provisioning was interrupted before the worktree was complete"
        leftovers = _unproven(ctx, task, entry, branch_ours, worktree_ours)
        if leftovers:
            detail += "; found " + " and ".join(leftovers) + ", left alone"
        detail += "; --fix undoes what is the task's own and marks it " + (
            "cancelled" if cancelled else "failed"
        )
    if not fix:
        return Finding("interrupted-provisioning", detail, task.name, task.id)
    if not ledger.claim(task.id, task.owner_pid, task.owner_start):
        return Finding(
            "provisioning-in-progress", "another process took it over", task.name, task.id
        )
    task = ledger.task(task.id)
    if branch_ours and not task.branch_created_by_us:
        task = record_created(ledger, task, actor, start, worktree=False, recovered=True)
    if worktree_ours and not task.worktree_created_by_us:
        # git may have been killed half-way through its checkout: adopt only a pristine one.
        if complete and not pristine(task, start):
            complete = False
        task = record_created(ledger, task, actor, start, branch=False, recovered=True)
    try:
        if complete:
            finish(ctx, ledger, task, actor, setup_is_ours=False)
            return Finding("interrupted-provisioning", detail, task.name, task.id, fixed="finished")
        final = TaskState.CANCELLED if cancelled else TaskState.FAILED
        # Asked to cancel, what setup left may go too (anything else written there is saved
        # first), unless something a snapshot cannot keep is there.
        force = cancelled and runtime is not None and not unsafe(ctx, ledger, task, runtime)
        rollback(
            ctx, ledger, task, reason="interrupted: " + detail, actor=actor, force=force,
            final=final,
        )  # fmt: skip
    except LaneboardError as err:
        reasons = "; ".join([str(err), *err.details])
        return Finding(
            "interrupted-provisioning", detail, task.name, task.id, fixed=f"not fixed: {reasons}"
        )
    kept = ledger.task(task.id)
    return Finding(
        "interrupted-provisioning", detail, task.name, task.id, fixed=f"marked {kept.state.value}"
    )


def _unproven(
    ctx: RepoContext,
    task: Task,
    entry: WorktreeEntry | None,
    branch_ours: bool,
    worktree_ours: bool,
) -> list[str]:
    found: list[str] = []
    if entry is not None and not worktree_ours:
        found.append(f"a worktree at {entry.path} that laneboard cannot prove it created")
    elif entry is None and os.path.lexists(task.worktree_path):
        found.append(f"a directory at {task.worktree_path} that is not a worktree")
    if ctx.git.branch_tip(task.branch) is not None and not branch_ours:
        found.append(f"branch {task.branch} that laneboard cannot prove it created")
    return found
