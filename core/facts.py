"""Gathering the facts the cleanup policy decides on, fresh from disk, at the moment of removal.

Owns the reads: verification, leases, /proc, `git status` (untracked files listed whatever
`status.showUntrackedFiles` says; ignored files listed), the index flags, the admin dir
(operations in progress, lock), submodules, nested worktrees, and reachability of HEAD and the
branch. Never caches and never changes anything. A worktree that fails verification is not looked
into any further: running git inside a forged directory would run its config and hooks.
"""

from __future__ import annotations

import os
from pathlib import Path

from core import procs
from core.cleanup import BranchFacts, WorktreeFacts
from core.git import WorktreeEntry, run_git, status, worktree_list
from core.leases import LeaseState, LeaseStore
from core.ledger import Ledger
from core.models import Task
from core.provision import LOCK_PREFIX, branch_message, unchanged_copies
from core.repo import RepoContext
from core.runtime import Runtime

OPERATIONS = (
    ("MERGE_HEAD", "merge"),
    ("rebase-merge", "rebase (merge backend)"),
    ("rebase-apply", "rebase or am (apply backend)"),
    ("CHERRY_PICK_HEAD", "cherry-pick"),
    ("REVERT_HEAD", "revert"),
    ("sequencer", "sequencer (a cherry-pick or revert series)"),
    ("BISECT_LOG", "bisect"),
    ("BISECT_START", "bisect"),
)
"""Files in a worktree's admin dir that mean an operation is in progress there."""


def admin_dir(ctx: RepoContext, task: Task) -> Path | None:
    return ctx.common_dir / "worktrees" / task.admin_name if task.admin_name else None


def operations_in(gitdir: Path) -> list[str]:
    """Operations in progress according to a (worktree's or the root's) git dir."""
    found: list[str] = []
    for name, label in OPERATIONS:
        if (gitdir / name).exists() and label not in found:
            found.append(label)
    return found


def worktree_exists(
    ctx: RepoContext, task: Task, entries: list[WorktreeEntry] | None = None
) -> bool:
    """Something is at the task's path, or git still lists a worktree there."""
    path = os.path.realpath(task.worktree_path)
    listed = worktree_list(ctx.root) if entries is None else entries
    return os.path.lexists(task.worktree_path) or any(
        os.path.realpath(e.path) == path for e in listed
    )


def gather(
    ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime, store: LeaseStore
) -> WorktreeFacts:
    """Every fact `cleanup.worktree_blockers` needs about the task's worktree, read now."""
    entries = worktree_list(ctx.root)  # one listing serves both questions below
    if not worktree_exists(ctx, task, entries):
        return WorktreeFacts(exists=False)
    worktree = Path(task.worktree_path)
    verdict = ctx.verify(task)
    leases = tuple(
        f"#{lease.seq} `{' '.join(lease.command)}` (pid {lease.child_pid or lease.holder_pid})"
        for lease in store.active(task.repo_id)
        if lease.lane == task.id and lease.state is LeaseState.RUNNING
    )
    agent = tuple(runtime.pane_processes(task))
    if not task.worktree_created_by_us or not verdict.ok:
        return WorktreeFacts(
            created_by_us=task.worktree_created_by_us,
            verification=None if verdict.ok else str(verdict),
            leases=leases,
            agent=agent,
        )
    facts = status(worktree, ignored=True)
    admin = admin_dir(ctx, task)
    assert admin is not None  # verification passed, so the admin name is known
    lock = _read_lock(admin)
    unique, kept = commits_at_stake(ctx, task, worktree, facts.head)
    return WorktreeFacts(
        head=facts.head,
        unborn=facts.head is None,
        kept_tips=kept,
        leases=leases,
        agent=agent,
        processes=tuple(procs.inside(str(worktree))),
        staged=tuple(facts.staged),
        unstaged=tuple(p for p in facts.unstaged if p not in facts.submodules),
        conflicted=tuple(facts.conflicted),
        untracked=tuple(facts.untracked),
        repositories=tuple(_repositories(worktree, facts.untracked + facts.ignored)),
        untracked_ours=unchanged_copies(ledger, task),
        ignored=tuple(facts.ignored),
        hidden=tuple(_hidden(worktree)),
        operations=tuple(operations_in(admin)),
        lock=lock,
        initializing=lock is not None and (lock == "initializing" or lock.startswith(LOCK_PREFIX)),
        submodules=tuple(_initialized_submodules(worktree) + _module_repositories(admin)),
        nested=tuple(
            e.path
            for e in entries
            if Path(os.path.realpath(worktree)) in Path(os.path.realpath(e.path)).parents
        ),
        unique_commits=tuple(f"{sha[:10]} {subject}" for sha, subject in unique),
    )


def commits_at_stake(
    ctx: RepoContext, task: Task, worktree: Path | None, head: str | None
) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """(commits only HEAD or the branch hold, tips of commits only a reflog or per-worktree ref
    holds). The first block removal (the operator must see them, `--force` snapshots them); the
    second are saved in every snapshot without blocking: they are what `commit --amend` or a
    rebase left behind, which git would keep for its reflog's lifetime."""
    tip = ctx.git.branch_tip(task.branch)
    unique = ctx.git.unique_commits([head, tip], exclude=task.branch)
    logged = reflog_tips(ctx, task, worktree)
    if not logged:
        return unique, ()
    held = {sha for sha, _ in unique}
    everything = {
        sha for sha, _ in ctx.git.unique_commits([head, tip, *logged], exclude=task.branch)
    }
    kept = tuple(t for t in logged if t in everything and t not in held and t not in (head, tip))
    return unique, kept


def reflog_tips(ctx: RepoContext, task: Task, worktree: Path | None) -> list[str]:
    """Commits named by what removal deletes besides the branch: the worktree's HEAD reflog and
    per-worktree refs (`refs/worktree/…`, `refs/bisect/…`, `refs/rewritten/…`), and the
    branch's own reflog. A commit reset away is still in a reflog; it must not become
    unreachable because its reflog went with the worktree."""
    tips: list[str] = []
    if worktree is not None:
        for args in (
            ["reflog", "show", "--format=%H", "HEAD"],
            [
                "for-each-ref",
                "--format=%(objectname)",
                "refs/worktree/",
                "refs/bisect/",
                "refs/rewritten/",
            ],
        ):
            result = run_git(args, cwd=worktree, check=False)
            tips += result.stdout.decode().split()
    result = run_git(
        ["reflog", "show", "--format=%H", f"refs/heads/{task.branch}"], cwd=ctx.root, check=False
    )
    tips += result.stdout.decode().split()
    return list(dict.fromkeys(t for t in tips if ctx.git.has_commit(t)))


def _repositories(worktree: Path, entries: list[str]) -> list[str]:
    """Untracked or ignored directories that are, or hold, a repository of their own (a `.git`
    at any depth, found by lstat alone, never following a symlink): removing the worktree
    would delete its history."""
    found: list[str] = []
    for entry in entries:
        if not entry.endswith("/"):
            continue
        stack = [worktree / entry]
        while stack:
            directory = stack.pop()
            try:
                children = list(os.scandir(directory))
            except OSError:
                continue
            if any(child.name == ".git" for child in children):
                found.append(str(directory.relative_to(worktree)) + "/")
                continue
            stack += [Path(c.path) for c in children if c.is_dir(follow_symlinks=False)]
    return found


def _module_repositories(admin: Path) -> list[str]:
    """Submodule repositories git keeps in the worktree's own git dir (`modules/`): they hold
    the submodule's commits even after `git submodule deinit`, and removal deletes them."""
    modules = admin / "modules"
    try:
        return [f"{entry.name} (in {modules})" for entry in os.scandir(modules) if entry.is_dir()]
    except OSError:
        return []


def _read_lock(admin: Path) -> str | None:
    try:
        return (admin / "locked").read_text(errors="replace").strip()
    except FileNotFoundError:
        return None


def _hidden(worktree: Path) -> list[str]:
    """Tracked files flagged assume-unchanged (lower-case tag) or skip-worktree (`S`) that exist
    on disk: git would not report their changes. Sparse-checkout entries absent on disk are fine."""
    out = run_git(["ls-files", "-v", "-z"], cwd=worktree).stdout.decode(errors="surrogateescape")
    found = []
    for item in out.split("\0"):
        if len(item) < 3:
            continue
        tag, path = item[0], item[2:]
        if (tag.islower() or tag == "S") and os.path.lexists(worktree / path):
            found.append(path)
    return found


def _initialized_submodules(worktree: Path) -> list[str]:
    """Gitlinks (mode 160000) whose directory holds a `.git`: an initialized submodule."""
    out = run_git(["ls-files", "-s", "-z"], cwd=worktree).stdout.decode(errors="surrogateescape")
    found = []
    for item in out.split("\0"):
        meta, _, path = item.partition("\t")
        if meta.startswith("160000 ") and os.path.lexists(worktree / path / ".git"):
            found.append(path)
    return found


def branch_facts(ctx: RepoContext, task: Task, recorded_tip: str | None) -> BranchFacts:
    """Whether the task's branch may be deleted: its tip now, where it is in use, whether its
    commits are reachable from another ref (a snapshot or anchor counts)."""
    ctx.git.refresh()
    tip = ctx.git.branch_tip(task.branch)
    in_use: list[str] = []
    ref = f"refs/heads/{task.branch}"
    for entry in worktree_list(ctx.root):
        if entry.branch == task.branch:
            in_use.append(f"checked out at {entry.path}")
    for gitdir in [ctx.common_dir, *sorted((ctx.common_dir / "worktrees").glob("*"))]:
        for marker in ("rebase-merge/head-name", "rebase-apply/head-name", "BISECT_START"):
            try:
                content = (gitdir / marker).read_text(errors="replace").strip()
            except OSError:
                continue
            if content in (ref, task.branch):
                in_use.append(f"{marker.split('/')[0].lower()} in {gitdir}")
    reachable = tip is None or not ctx.git.unique_commits([tip], exclude=task.branch)
    return BranchFacts(
        name=task.branch,
        # The ledger's fact, and the branch's oldest reflog entry naming this task: a branch the
        # user deleted and created again under the same name is not laneboard's.
        created_by_us=task.branch_created_by_us
        and ctx.git.created_by(task.branch, branch_message(task.id)),
        tip=tip,
        recorded_tip=recorded_tip,
        in_use=tuple(in_use),
        reachable_elsewhere=reachable,
    )
