"""A task's completion record: what a finished child hands its parent (`laneboard wait`,
`show --json`'s `completion`).

Read only. Git is asked fresh each time (the branch tip, the commits and files from the pinned
base SHA, the worktree's status); the journal gives the checks the task reported, its last
message, its screen when it finished and why it failed or was cancelled. A worktree that is
gone or fails verification is not read (its counts stay empty and `worktree_problem` says why).
"""

from __future__ import annotations

from pathlib import Path

from laneboard.core.adapters import history
from laneboard.core.adapters.git import status
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Task, TaskState
from laneboard.core.domain.review import FileChange
from laneboard.core.domain.runtime import Runtime, pane_of, pane_state
from laneboard.core.domain.views import Completion, latest_checks
from laneboard.core.operations.steps.commits import committed

DONE = frozenset(
    {
        TaskState.READY_FOR_REVIEW,
        TaskState.RETAINED,
        TaskState.FAILED,
        TaskState.CANCELLED,
        TaskState.DISCARDED,
        TaskState.FINALIZED,
    }
)
"""States in which a task's agent has finished (or never will run): what `wait` waits for."""
SCREEN_LINES = 40
FINISHED = ("agent.exited", "agent.done", "agent.paused", "task.retained")
"""Events that keep the screen an agent left."""


def _branch_tip(ctx: RepoContext, ledger: Ledger, task: Task) -> str | None:
    """The tip of the task's branch, while the branch is this task's: a retired task's branch
    name may belong to a later task of the same name (a retry, a restore) by now."""
    if not task.live:
        others = ledger.tasks(ctx.repo.id, include_retired=False)
        if any(other.branch == task.branch for other in others):
            return None
    return ctx.git.branch_tip(task.branch)


def tail(screen: str) -> str:
    """The last `SCREEN_LINES` lines of a screen that hold something (a pane's empty bottom
    half says nothing)."""
    return "\n".join([line for line in screen.split("\n") if line.strip()][-SCREEN_LINES:])


def is_done(task: Task) -> bool:
    return task.state in DONE


def is_lost(runtime: Runtime, task: Task) -> bool:
    """The task runs, on the tmux server this process talks to, and its pane is gone (the
    server died, the pane was killed): nothing more will happen until it is resumed."""
    pane = pane_of(task)
    if task.state is not TaskState.RUNNING or pane is None:
        return False
    if task.tmux_socket and task.tmux_socket != runtime.socket_path:
        return False  # another server: this process cannot tell
    return pane_state(runtime, pane) is None


def completion(ctx: RepoContext, ledger: Ledger, runtime: Runtime, task: Task) -> Completion:
    """The record of `task` now."""
    events = ledger.events(task.id)
    ctx.git.refresh()
    branch = _branch_tip(ctx, ledger, task)
    staged: list[str] = []
    modified: list[str] = []
    untracked: list[str] = []
    conflicted: list[str] = []
    problem: str | None = None
    head: str | None = None
    detached = False
    if not task.live or not Path(task.worktree_path).is_dir():
        problem = f"{task.worktree_path} is gone"
    else:
        verdict = ctx.verify(task)
        if not verdict.ok:
            problem = f"the worktree fails verification: {verdict}"
        else:
            try:
                facts = status(Path(task.worktree_path))
                staged, modified = facts.staged, facts.unstaged
                untracked, conflicted = facts.untracked, facts.conflicted
                head = facts.head
                detached = facts.branch != task.branch.removeprefix("refs/heads/")
            except LaneboardError as err:
                problem = str(err)
    head = head or branch or task.finalized_sha or task.reviewed_sha
    ahead = 0
    files: tuple[FileChange, ...] = ()
    if head is not None:
        ahead = history.ahead_behind(ctx.root, task.base_sha, head)[0]
        files = committed(ctx, ledger, task.base_sha, head).files
    said = [e for e in events if e.kind == "agent.message"]
    ended = [e for e in events if e.kind in FINISHED and e.data.get("screen")]
    reasons = [e for e in events if e.kind in ("task.failed", "task.cancelled")]
    screen = str(ended[-1].data["screen"]) if ended else ""
    seen = pane_state(runtime, pane_of(task)) if task.state is TaskState.RUNNING else None
    if seen is not None and seen.alive:
        screen = runtime.capture(seen.ref, SCREEN_LINES)
    lost = is_lost(runtime, task)
    return Completion(
        task=task,
        repo=ctx.repo,
        done=is_done(task) or lost,
        lost=lost,
        head_sha=head,
        branch_sha=branch,
        detached=detached,
        ahead=ahead,
        files=files,
        staged=tuple(staged),
        modified=tuple(modified),
        untracked=tuple(untracked),
        conflicted=tuple(conflicted),
        worktree_problem=problem,
        checks=latest_checks(events),
        message=str(said[-1].data.get("text")) if said else None,
        screen=tail(screen),
        reason=str(reasons[-1].data.get("reason")) if reasons else None,
    )
