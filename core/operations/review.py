"""Review of a task (DESIGN.md section 7): its commits and changed files since the merge base
with its target, each file's diff, what is not committed yet, and the pinned reviewed SHA.

What the commits hold is cached in the ledger by (merge base, tip): neither id ever names
anything else, so the cache is never wrong and never needs clearing. What the worktree holds
uncommitted is read fresh each time. Marking pins committed work only: the branch tip at that
moment, journalled with the time; finalize integrates exactly that commit.
"""

from __future__ import annotations

import time
from pathlib import Path

from laneboard.core.adapters import history
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import GitError, LaneboardError
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.review import Pending, Review
from laneboard.core.operations.steps import confinement
from laneboard.core.operations.steps.commits import committed


def tip_of(ctx: RepoContext, task: Task) -> str:
    """The commit the task's work ends at: its branch tip, or, once the branch is gone, the
    SHA it was finalized or reviewed at."""
    ctx.git.refresh()
    tip = ctx.git.branch_tip(task.branch) or task.finalized_sha or task.reviewed_sha
    if tip is None:
        raise LaneboardError(f"{task.name}: branch {task.branch} is gone; nothing to review")
    return tip


def target_tip(ctx: RepoContext, task: Task) -> str | None:
    return ctx.git.branch_tip(task.target) if task.target else None


def review(ctx: RepoContext, ledger: Ledger, task: Task) -> Review:
    """The task's review now. The merge base is with the target's tip (the task's base commit
    when it has no target, shares no history with it, or is retired: once merged, the merge
    base with the target would be its own tip)."""
    confinement.settle(ctx.common_dir, task.id)
    tip = tip_of(ctx, task)
    against = target_tip(ctx, task)
    base = (history.merge_base(ctx.root, against, tip) if against and task.live else None) or (
        task.base_sha  # a retired task's work is what it added to its base, merged or not
    )
    ahead, behind = history.ahead_behind(ctx.root, against or base, tip)
    uncommitted: tuple[Pending, ...] = ()
    untracked: tuple[str, ...] = ()
    problem: str | None = None
    if task.live and Path(task.worktree_path).is_dir():
        try:
            uncommitted, untracked = history.pending(Path(task.worktree_path))
        except GitError as err:
            problem = str(err)
    elif task.live:
        problem = f"{task.worktree_path} is gone"
    return Review(
        target=task.target,
        target_sha=against,
        merge_base=base,
        tip=tip,
        committed=committed(ctx, ledger, base, tip),
        ahead=ahead,
        behind=behind,
        uncommitted=uncommitted,
        untracked=untracked,
        reviewed_sha=task.reviewed_sha,
        reviewed_at=task.reviewed_at,
        worktree_problem=problem,
    )


def mark(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> tuple[Task, Review]:
    """Pin the branch tip now as the reviewed SHA, with the time. Uncommitted changes are not
    part of it: they are recorded with the mark, and finalize refuses them until committed."""
    if not task.live:
        raise LaneboardError(f"task {task.name} is {task.state.value}; it has been retired")
    ctx.git.refresh()
    if ctx.git.branch_tip(task.branch) is None:
        raise LaneboardError(f"{task.name}: branch {task.branch} is gone; there is no tip to mark")
    seen = review(ctx, ledger, task)
    now = time.time()
    marked = ledger.update_task(
        task.id,
        actor=actor,
        kind="review.marked",
        data={
            "sha": seen.tip,
            "previous": task.reviewed_sha,
            "merge_base": seen.merge_base,
            "uncommitted": len(seen.uncommitted),
            "untracked": len(seen.untracked),
        },
        reviewed_sha=seen.tip,
        reviewed_at=now,
    )
    return marked, review(ctx, ledger, marked)
