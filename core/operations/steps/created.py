"""What laneboard created for a task, and the proof of it: the journal's `branch.created` and
`worktree.created`, the task's intent, a worktree still locked with the task's lock reason.
Only what these say is the task's own may ever be removed by an undo."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from laneboard.core.adapters.git import status, worktree_list
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor, Task
from laneboard.core.operations.steps.naming import lock_reason


def intent(ledger: Ledger, task: Task) -> dict[str, Any]:
    """What the task's `task.intent` event recorded before anything was created."""
    event = next((e for e in ledger.events(task.id) if e.kind == "task.intent"), None)
    return dict(event.data) if event else {}


def record_created(
    ledger: Ledger,
    task: Task,
    actor: Actor,
    tip: str,
    *,
    branch: bool = True,
    worktree: bool = True,
    **data: Any,
) -> Task:
    """Journal that laneboard created the task's branch (at `tip`) and/or its worktree: the
    ownership facts that alone allow removing them later."""
    fields: dict[str, Any] = {}
    if branch:
        fields.update(branch_created_by_us=True, branch_tip_at_creation=tip)
    if worktree:
        fields.update(worktree_created_by_us=True)
    kind = "worktree.created" if worktree else "branch.created"
    return ledger.update_task(
        task.id,
        actor=actor,
        kind=kind,
        data={"path": task.worktree_path, "branch": task.branch, "tip": tip, **data},
        **fields,
    )


def pristine(task: Task, start: str) -> bool:
    """The worktree is exactly a finished checkout of `start`: nothing missing, nothing added,
    nothing ignored."""
    try:
        facts = status(Path(task.worktree_path), ignored=True)
    except LaneboardError:
        return False
    return facts.head == start and facts.clean and not facts.ignored


def locked_by_us(ctx: RepoContext, task: Task) -> bool:
    """Git lists a worktree at the task's path locked with this task's lock reason."""
    path = os.path.realpath(task.worktree_path)
    return any(
        os.path.realpath(e.path) == path and e.locked == lock_reason(task.id)
        for e in worktree_list(ctx.root)
    )


def adopt_leftover_worktree(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> Task:
    """After a failed or interrupted `git worktree add`, git may have left the worktree behind.
    It is the task's own exactly when it carries this task's lock reason; journal it so, so that
    rollback removes it. Anything else at the path is left alone."""
    if task.worktree_created_by_us or not locked_by_us(ctx, task):
        return task
    return record_created(
        ledger, task, actor, task.branch_tip_at_creation or "", branch=False, recovered=True
    )
