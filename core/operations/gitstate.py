"""What each task's worktree and branch hold right now, cheaply, for `ls`, `show` and the board.

For every repository at once: the worktrees are verified by filesystem reads, then one
`git status --porcelain=v2 -z --branch` runs per verified worktree (several at a time, so they
overlap; ignored files are not asked for). The task's target is given to that status as the
branch's upstream for the one command (`-c branch.<b>.remote=. -c branch.<b>.merge=<target>`),
so git reports ahead/behind in the same run, and one `git log --no-walk` per repository names
the last commit of every worktree. No pygit2 (its import alone costs more than all of this on a
small board). Nothing expensive (reflogs, unique commits, `/proc`) is read here: that is for the
moment of removal (`operations.steps.facts`). A worktree that fails verification is not looked
into (git would run its config).
"""

from __future__ import annotations

import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from laneboard.core.adapters.git import StatusFacts, git_env, parse_status
from laneboard.core.adapters.gitcache import GitCache
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.models import Task
from laneboard.core.domain.values import replace
from laneboard.core.domain.verdict import Verdict
from laneboard.core.domain.views import Commit, GitState, Keeping

STATUS = ["status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all"]
LAST_COMMIT = "--format=%H%x1f%ct%x1f%s"
AT_ONCE = 8
"""At most this many `git status` run at the same time."""


Group = tuple[RepoContext, Sequence[Task], Mapping[str, Verdict]]
"""One repository's tasks to read and their verifications."""


def git_states(
    groups: Sequence[Group], *, ignored: dict[str, set[str]] | None = None
) -> dict[str, GitState]:
    """The `GitState` of each live task of every group, by task id. A group's verdicts hold
    each of its live tasks' verification (the caller shows it too): only a verified worktree
    is read. With `ignored`, each status also names the ignored directories it did not look
    into (`--ignored=matching`), put there by task id (what the controller needs to know
    before it trusts a watch that leaves such directories out).

    One pipeline for every group: up to `AT_ONCE` `git status` run at a time, across
    repositories, and the next starts as soon as the oldest is read (so no repository waits
    for the last status of the one before). Each task's verdict is looked up just before its
    status would start, so a verdicts mapping that verifies when asked (`LazyVerdicts`)
    verifies one worktree while git reads the others. Then one `git log` per repository
    names the last commits, all of them running at once."""
    states: dict[str, GitState] = {}
    pending = ((task, verdicts) for _, tasks, verdicts in groups for task in tasks)

    def next_ready() -> Task | None:
        for task, verdicts in pending:
            if not task.live:
                continue
            verdict = verdicts[task.id]
            if verdict.ok:
                return task
            states[task.id] = GitState(present=False, problem=str(verdict))
        return None

    running: deque[tuple[Task, subprocess.Popen[bytes]]] = deque()
    while True:
        while len(running) < AT_ONCE and (ready := next_ready()) is not None:
            running.append((ready, _start_status(ready, ignored is not None)))
        if not running:
            break
        task, proc = running.popleft()
        out, err = proc.communicate()
        if proc.returncode != 0:
            problem = err.decode(errors="replace").strip().splitlines()
            states[task.id] = GitState(
                present=False, problem=problem[-1] if problem else "git status failed"
            )
            continue
        facts = parse_status(out.decode(errors="surrogateescape"))
        states[task.id] = _state(facts)
        if ignored is not None:
            ignored[task.id] = {p.rstrip("/") for p in facts.ignored if p.endswith("/")}
    _name_last_commits([(ctx, [t.id for t in tasks]) for ctx, tasks, _ in groups], states)
    return states


class LazyVerdicts(dict[str, Verdict]):
    """Verdicts by task id, each made by `verify(task)` when first asked for (only for the
    tasks of `tasks`)."""

    def __init__(self, tasks: Sequence[Task], verify: Callable[[Task], Verdict]) -> None:
        super().__init__()
        self._tasks = {task.id: task for task in tasks}
        self._verify = verify

    def __missing__(self, task_id: str) -> Verdict:
        verdict = self[task_id] = self._verify(self._tasks[task_id])
        return verdict

    def complete(self) -> LazyVerdicts:
        """Every task's verdict made (those not asked for yet, in order); itself."""
        for task_id in self._tasks:
            if task_id not in self:
                self.__missing__(task_id)
        return self


def _start_status(task: Task, ignored: bool = False) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["git", *_upstream(task), *STATUS, *(["--ignored=matching"] if ignored else [])],
        cwd=Path(task.worktree_path),
        env=git_env(read=True),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _upstream(task: Task) -> list[str]:
    """`-c` options that make the task's target its branch's upstream for one command."""
    if not task.target:
        return []
    return [
        "-c",
        f"branch.{task.branch}.remote=.",
        "-c",
        f"branch.{task.branch}.merge=refs/heads/{task.target}",
    ]


def _name_last_commits(
    groups: Sequence[tuple[RepoContext, Sequence[str]]], states: dict[str, GitState]
) -> None:
    """Fill in the last commit's subject and time of every state: one `git log` per repository
    of `groups` (its root, the ids of its tasks), all started before any is read."""
    logs = []
    for ctx, task_ids in groups:
        heads = sorted({s.head for t in task_ids if (s := states.get(t)) and s.head})
        if heads:
            logs.append(
                subprocess.Popen(
                    ["git", "log", "--no-walk=unsorted", "-z", LAST_COMMIT, *heads],
                    cwd=ctx.root,
                    env=git_env(read=True),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
    commits = {}
    for proc in logs:
        out, _ = proc.communicate()
        for record in out.decode(errors="replace").split("\0"):
            sha, _, rest = record.strip("\n").partition("\x1f")
            at, _, subject = rest.partition("\x1f")
            if sha and at.isdigit():
                commits[sha] = Commit(sha=sha, subject=subject, at=float(at))
    for task_id, state in states.items():
        if state.head in commits:
            states[task_id] = replace(state, last_commit=commits[state.head])


def _state(facts: StatusFacts) -> GitState:
    return GitState(
        present=True,
        head=facts.head,
        detached=facts.branch is None,
        staged=len(facts.staged),
        modified=len(facts.unstaged),
        untracked=len(facts.untracked),
        conflicted=len(facts.conflicted),
        ahead=facts.ahead,
        behind=facts.behind,
    )


def keep_states(
    cache: GitCache,
    keeping: Keeping,
    states: Mapping[str, GitState],
    gens: Mapping[str, int],
    ignored: Mapping[str, set[str]],
) -> None:
    """Store each state computed while its task's change count was `gens[id]`, when the watch
    covers the task and git ignores every directory the watch leaves out."""
    kept = [
        (task_id, gens[task_id], state)
        for task_id, state in states.items()
        if task_id in gens
        and state.present
        and task_id in keeping.covered
        and set(keeping.skipped.get(task_id, ())) <= ignored.get(task_id, set())
    ]
    if kept:
        cache.store_all(kept, keeping.epoch)
