"""Rolling back a failed provisioning: undo exactly what the task created, and mark it failed.

The worktree is removed only if the ledger says laneboard created it and it still verifies as
that worktree; anything in it that is not the pristine checkout is saved in a snapshot first
(`laneboard restore` finds it), so a rollback never loses a file someone wrote meanwhile. The
branch is deleted only if laneboard created it, no worktree has it checked out, and it still
points at its creation tip (compare-and-swap). What is kept is said in the journal and in the
failure reason. Removal is a root-lane operation: it waits for in-flight lane commands.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from laneboard.core.adapters.git import delete_ref_if, status, worktree_list, worktree_remove
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError, ProvisionFailed, describe
from laneboard.core.domain.lanes import Lease, LeaseKind
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.operations.steps.cancelling import CancelRequested, cancel_requested
from laneboard.core.operations.steps.copies import unchanged_copies
from laneboard.core.operations.steps.created import adopt_leftover_worktree

OnWait = Callable[[Lease], None] | None


def rollback_after(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    err: BaseException,
    *,
    actor: Actor,
    force: bool = True,
) -> ProvisionFailed:
    """Roll back after `err` stopped provisioning; return the error to raise. If the rollback
    itself cannot run (git broken, interrupted again), the task stays `provisioning`, owned by
    this process, so that `laneboard doctor --fix` finishes or undoes it later; the error says
    so. A provisioning stopped because someone cancelled the task (`laneboard cancel`) ends
    `cancelled`, any other `failed`."""

    reason = describe(err)
    cancelled = isinstance(err, CancelRequested) or cancel_requested(ledger, task.id)
    final = TaskState.CANCELLED if cancelled else TaskState.FAILED
    try:
        task = adopt_leftover_worktree(ctx, ledger, ledger.task(task.id), actor)
        rollback(ctx, ledger, task, reason=reason, actor=actor, force=force, final=final)
    except (LaneboardError, OSError, KeyboardInterrupt) as again:
        return ProvisionFailed(
            f"provisioning {task.name} failed: {reason}; rolling back failed too "
            f"({describe(again)}); `laneboard doctor --fix` undoes it"
        )
    if cancelled:
        return ProvisionFailed(f"{task.name}: cancelled while provisioning; nothing of it is left")
    return ProvisionFailed(f"provisioning {task.name} failed: {reason}")


def rollback(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    *,
    reason: str,
    actor: Actor,
    force: bool = True,
    final: TaskState = TaskState.FAILED,
) -> Task:
    """Undo exactly what this task created and mark it `final` (failed, or cancelled). `force`
    (files inside may be removed once saved) is for a worktree no one but laneboard worked in;
    without it a worktree that is not pristine is kept."""
    ledger.append_event(
        task.id,
        ctx.repo.id,
        "rollback.intent",
        actor,
        {"path": task.worktree_path, "branch": task.branch, "tip": task.branch_tip_at_creation},
    )
    command = ["laneboard", "rollback", task.name]
    with ctx.lane(ledger, None, LeaseKind.REMOVE, command):
        kept = _undo(ctx, ledger, task, actor, force=force)
    full_reason = "; ".join([reason, *kept])
    return ledger.update_task(
        task.id,
        actor=actor,
        kind=f"task.{final.value}",
        data={"reason": full_reason, "kept": kept},
        state=final,
        settled=True,
    )


def _undo(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, *, force: bool) -> list[str]:
    """Remove the task's worktree and branch where the ledger proves them its own; return what
    was kept and why."""

    path = Path(task.worktree_path)
    kept: list[str] = []
    entries = worktree_list(ctx.root)
    registered = any(os.path.realpath(e.path) == os.path.realpath(path) for e in entries)
    if task.worktree_created_by_us and registered:
        verdict = ctx.verify(task)
        if not verdict.ok:
            kept.append(f"worktree {path} kept: it no longer verifies ({verdict})")
        else:
            try:
                work, anything = _not_pristine(ledger, task)
                if anything and not force:
                    raise LaneboardError(f"it holds files laneboard did not put there: {anything}")
                if work:
                    # Saving needs pygit2, which `new` loads only when a rollback has work to
                    # keep (its import is most of `new`'s start-up otherwise).
                    from laneboard.core.operations.steps.snapshots import save_worktree

                    save_worktree(ctx, ledger, task, actor)
                worktree_remove(ctx.root, path, force=True, unlock=True)
                ledger.append_event(
                    task.id, ctx.repo.id, "worktree.removed", actor, {"path": str(path)}
                )
                entries = worktree_list(ctx.root)
            except LaneboardError as err:
                kept.append(f"worktree {path} kept: {err}")
    checked_out = [e.path for e in entries if e.branch == task.branch]
    if checked_out and task.branch_created_by_us:
        kept.append(f"branch {task.branch} kept: checked out at {checked_out[0]}")
    elif task.branch_created_by_us and task.branch_tip_at_creation:
        if delete_ref_if(ctx.root, f"refs/heads/{task.branch}", task.branch_tip_at_creation):
            ledger.append_event(
                task.id,
                ctx.repo.id,
                "branch.deleted",
                actor,
                {"branch": task.branch, "tip": task.branch_tip_at_creation},
            )
        elif ctx.git.branch_tip(task.branch) is not None:
            kept.append(f"branch {task.branch} kept: it moved since creation")
    return kept


def _not_pristine(ledger: Ledger, task: Task) -> tuple[bool, str | None]:
    """(whether the worktree holds work a snapshot must keep: commits, changes or untracked
    files; the first thing in it that is not its checkout at the creation tip or a file
    provisioning copied there, ignored files included, or None)."""
    facts = status(Path(task.worktree_path), ignored=True)
    ours = unchanged_copies(ledger, task)
    moved = [] if facts.head == task.branch_tip_at_creation else [f"HEAD moved to {facts.head}"]
    work = moved + facts.staged + facts.unstaged + facts.conflicted
    work += [path for path in facts.untracked if path not in ours]
    ignored = [path for path in facts.ignored if path not in ours]
    first = (work + ignored)[0] if work or ignored else None
    return bool(work), first


def undo_cancel(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> Task:
    """Remove exactly what the `cancelling` task created and mark it cancelled (the cancel's
    own second half, and what `doctor --fix` runs for a cancel that was interrupted)."""

    task = adopt_leftover_worktree(ctx, ledger, task, actor)
    return rollback(
        ctx, ledger, task, reason="cancelled", actor=actor, force=True, final=TaskState.CANCELLED
    )
