"""What each task's worktree and branch hold right now, cheaply, for `ls`, `show` and the board.

Per repository: the worktrees are verified by filesystem reads, then one
`git status --porcelain=v2 -z --branch` runs per verified worktree (started together, so they
overlap; ignored files are not asked for), and ahead/behind against the task's target and the
last commit come from the object store (pygit2). Nothing expensive (reflogs, unique commits,
`/proc`) is read here: that is for the moment of removal (`core.operations.facts`). A worktree
that fails verification is not looked into (git would run its config).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from laneboard.core.adapters.git import git_env, parse_status
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.models import Task
from laneboard.core.domain.views import Commit, GitState

STATUS = ["git", "status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all"]
AT_ONCE = 8
"""At most this many `git status` run at the same time."""


def git_states(ctx: RepoContext, tasks: Sequence[Task]) -> dict[str, GitState]:
    """The `GitState` of each live task of `ctx`'s repository, by task id."""
    states: dict[str, GitState] = {}
    ready: list[Task] = []
    for task in tasks:
        if not task.live:
            continue
        verdict = ctx.verify(task)
        if verdict.ok:
            ready.append(task)
        else:
            states[task.id] = GitState(present=False, problem=str(verdict))
    for start in range(0, len(ready), AT_ONCE):
        batch = ready[start : start + AT_ONCE]
        running = [
            subprocess.Popen(
                STATUS,
                cwd=Path(task.worktree_path),
                env=git_env(read=True),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for task in batch
        ]
        for task, proc in zip(batch, running, strict=True):
            out, err = proc.communicate()
            if proc.returncode != 0:
                problem = err.decode(errors="replace").strip().splitlines()
                states[task.id] = GitState(
                    present=False, problem=problem[-1] if problem else "git status failed"
                )
                continue
            states[task.id] = _state(ctx, task, out.decode(errors="surrogateescape"))
    return states


def _state(ctx: RepoContext, task: Task, raw: str) -> GitState:
    facts = parse_status(raw)
    ahead = behind = None
    target_tip = ctx.git.branch_tip(task.target) if task.target else None
    if facts.head and target_tip:
        ahead, behind = ctx.git.ahead_behind(facts.head, target_tip)
    last = None
    if facts.head:
        info = ctx.git.commit_info(facts.head)
        if info is not None:
            last = Commit(sha=facts.head, subject=info[0], at=info[1])
    return GitState(
        present=True,
        head=facts.head,
        detached=facts.branch is None,
        staged=len(facts.staged),
        modified=len(facts.unstaged),
        untracked=len(facts.untracked),
        conflicted=len(facts.conflicted),
        ahead=ahead,
        behind=behind,
        last_commit=last,
    )
