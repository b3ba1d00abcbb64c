"""`laneboard restore`: a task's newest snapshot brought back into a new task and worktree.

Snapshots are found by task, whatever became of it (discarded, failed, or a task whose
discard stopped), by its name or id. The task restored from keeps its record and its snapshots;
the new task gets the same name (or `--as NAME`) and a branch created anew at the saved tip,
then provisioning applies the snapshot: HEAD, staged, unstaged and untracked files as they were.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from laneboard.core.adapters import snapshot, vault
from laneboard.core.adapters.config import state_dir
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import Lease
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.names import branch_for, check_task_name, namespace_of
from laneboard.core.operations.steps.creation import create, refuse_live_name

OnWait = Callable[[Lease], None] | None


def source(ctx: RepoContext, ledger: Ledger, name: str) -> Task:
    """The most recent task called `name` (or with that id) that has a snapshot."""
    candidates = [t for t in ledger.tasks(ctx.repo.id) if (t.name == name or t.id == name)]
    with_snapshots = [t for t in candidates if ledger.snapshots(t.id)]
    if not with_snapshots:
        if candidates:
            raise LaneboardError(f"task {name} has no snapshot to restore")
        raise LaneboardError(f"no task named {name!r} in {ctx.root}")
    found = max(with_snapshots, key=lambda t: t.created_at)
    if found.state is TaskState.DISCARDING:
        raise LaneboardError(
            f"task {found.name} is being discarded (or was interrupted); let it finish, or run "
            "`laneboard doctor --fix`, then restore"
        )
    if found.live:
        if os.path.lexists(found.worktree_path):
            raise LaneboardError(
                f"task {found.name} is {found.state.value} with its worktree at "
                f"{found.worktree_path}; restore brings back a task whose worktree was removed"
            )
        raise LaneboardError(
            f"task {found.name} is {found.state.value} but its worktree is gone; "
            f"`laneboard discard {found.name}` ends it (keeping its snapshots), then restore"
        )
    return found


def restore(
    ctx: RepoContext,
    ledger: Ledger,
    name: str,
    actor: Actor,
    *,
    as_name: str | None = None,
) -> Task:
    """Bring the newest snapshot of the task `name` back as a new task (`as_name`, default the
    same name) whose branch is created anew; the old task's record and snapshot stay."""
    old = source(ctx, ledger, name)
    new_name = check_task_name(as_name) if as_name else old.name
    refuse_live_name(ledger, ctx, new_name)
    _, ref, sha = ledger.snapshots(old.id)[-1]
    saved = snapshot.find(ctx.root, ref, sha)
    if saved is None:  # the repository lost it: the vault has its own copy
        vault.bring_back(vault.path(state_dir(), ctx.repo.id), ctx.common_dir, sha, ref)
        saved = snapshot.read(ctx.root, ref, sha)
    branch = old.branch
    if as_name is not None or namespace_of(old.branch, old.name) is None:
        branch = branch_for(ctx.settings.branch_prefix, new_name)
    hint = "" if as_name else f" (restore {name} --as NEW_NAME uses a new branch)"
    extra = {
        "restore_from": old.id,
        "snapshot_ref": ref,
        "snapshot_sha": sha,
        "target": old.target or ctx.git.integration_branch(ctx.settings.target),
        "parent_id": old.parent_id,  # a restored child is its parent's child again
    }
    task = create(
        ctx,
        ledger,
        new_name,
        branch,
        old.base_ref,
        old.base_sha,
        saved.tip or saved.head,
        extra,
        actor,
        branch_taken=f"branch {branch} exists; restore creates it anew and never reuses a "
        f"branch{hint}",
    )
    ledger.append_event(old.id, ctx.repo.id, "task.restored_as", actor, {"task_id": task.id})
    return task
