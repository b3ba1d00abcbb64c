"""Gathering the facts the cleanup policy decides on, fresh from disk, at the moment of removal.

Owns the reads: verification, leases, /proc, `git status` (untracked files listed whatever
`status.showUntrackedFiles` says; ignored files listed), the index flags, the admin dir
(operations in progress, lock, reflogs), submodules, nested worktrees, and reachability of HEAD
and the branch. Never caches and never changes anything. A worktree that fails verification is
not looked into any further: running git inside a forged directory would run its config and
hooks. A worktree that is gone is judged by what git still keeps for it in its admin dir.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from laneboard.core.adapters import procs, safefs
from laneboard.core.adapters.git import (
    IndexListing,
    StatusFacts,
    WorktreeEntry,
    index_listing,
    status,
    worktree_list,
)
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.cleanup import BranchFacts, WorktreeFacts
from laneboard.core.domain.lanes import LeaseState
from laneboard.core.domain.models import Task
from laneboard.core.domain.runtime import Runtime, agent_processes, pane_of, pane_state
from laneboard.core.domain.values import field, replace, value
from laneboard.core.operations.steps.copies import unchanged_copies
from laneboard.core.operations.steps.naming import LOCK_PREFIX, branch_message

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

PER_WORKTREE_REFS = ("refs/worktree", "refs/bisect", "refs/rewritten")
"""Refs that live in a worktree's admin dir and go when it is removed."""


@value
class Observation:
    """What was seen of a task's worktree at one moment: the policy's facts, and the raw reads
    a snapshot is built from (so it describes exactly what was judged)."""

    facts: WorktreeFacts
    path: Path
    """Where the worktree was looked at (its own path, or the quarantine of a discard)."""
    status: StatusFacts | None = None
    """None when the worktree is gone or was not looked into (it failed verification)."""
    index: IndexListing = field(default_factory=IndexListing)
    index_key: tuple[int, int, int, int] | None = None
    """(inode, size, mtime ns, ctime ns) of the index file when `index` was read: git replaces
    the file whenever it writes it, so the same key means the same listing."""


def admin_dir(ctx: RepoContext, task: Task) -> Path | None:
    """The task's admin dir under `<common dir>/worktrees/`, when it is a real directory."""
    if not task.admin_name:
        return None
    path = ctx.common_dir / "worktrees" / task.admin_name
    try:
        info = path.lstat()
    except OSError:
        return None
    return path if stat.S_ISDIR(info.st_mode) else None


def operations_in(gitdir: Path) -> list[str]:
    """Operations in progress according to a (worktree's or the root's) git dir."""
    found: list[str] = []
    for name, label in OPERATIONS:
        if (gitdir / name).exists() and label not in found:
            found.append(label)
    return found


def listed(entries: list[WorktreeEntry], path: Path | str) -> WorktreeEntry | None:
    """git's record of the worktree at `path`, if it lists one there."""
    real = os.path.realpath(path)
    return next((e for e in entries if os.path.realpath(e.path) == real), None)


def observe(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    runtime: Runtime,
    store: LeaseStore,
    *,
    path: Path | None = None,
    known: StatusFacts | None = None,
    known_index: Observation | None = None,
) -> Observation:
    """Every fact `cleanup.worktree_blockers` needs about the task's worktree, read now, at
    `path` (default: the task's own). `known` is a `git status` of this worktree taken just
    before by the caller, reused instead of running it again; so is the index listing of
    `known_index` when the index file is still the one it was read from."""
    where = path or Path(task.worktree_path)
    entries = worktree_list(ctx.root)  # one listing serves every question below
    leases = tuple(
        f"#{lease.seq} `{' '.join(lease.command)}` (pid {lease.child_pid or lease.holder_pid})"
        for lease in store.active(task.repo_id)
        if lease.lane == task.id and lease.state is LeaseState.RUNNING
    )
    agent = tuple(agent_processes(runtime, pane_of(task)))
    pane = pane_state(runtime, pane_of(task)) if agent else None
    agent_pids = [pane.pid] if pane is not None and pane.pid else []
    waiting = tuple(f"{t.name} ({t.state.value})" for t in dependents(ledger, task))
    if not os.path.lexists(where):
        gone = _gone(ctx, task, listed(entries, where), leases, agent)
        return Observation(replace(gone, dependents=waiting), where)
    verdict = ctx.verify(task, path=where)
    if not task.worktree_created_by_us or not verdict.ok:
        facts = WorktreeFacts(
            created_by_us=task.worktree_created_by_us,
            verification=None if verdict.ok else str(verdict),
            leases=leases,
            agent=agent,
            dependents=waiting,
        )
        return Observation(facts, where)
    seen = known or status(where, ignored=True)
    admin = admin_dir(ctx, task)
    assert admin is not None  # verification passed, so the admin dir is there
    index_key = _stat_key(admin / "index")
    if known_index is not None and index_key is not None and known_index.index_key == index_key:
        index = known_index.index
    else:
        index = index_listing(where)
    lock = _read_lock(admin)
    unique, kept = commits_at_stake(ctx, task, admin, seen.head)
    unseen = procs.unseen(trust_namespace=ctx.settings.cleanup.trust_pid_namespace)
    facts = WorktreeFacts(
        head=seen.head,
        unborn=seen.head is None,
        kept_tips=kept,
        leases=leases,
        agent=agent,
        processes=() if unseen else tuple(procs.inside(str(where), besides=agent_pids)),
        processes_unseen=unseen,
        staged=tuple(seen.staged),
        unstaged=tuple(p for p in seen.unstaged if p not in seen.submodules),
        conflicted=tuple(seen.conflicted),
        untracked=tuple(seen.untracked),
        repositories=tuple(_repositories(where, seen.untracked + seen.ignored)),
        untracked_ours=unchanged_copies(ledger, task, where),
        ignored=tuple(seen.ignored),
        hidden=tuple(path for path in index.hidden if os.path.lexists(where / path)),
        operations=tuple(operations_in(admin)),
        lock=lock,
        initializing=lock is not None and (lock == "initializing" or lock.startswith(LOCK_PREFIX)),
        submodules=tuple(_initialized_submodules(where, index) + _module_repositories(admin)),
        nested=tuple(
            e.path
            for e in entries
            if Path(os.path.realpath(where)) in Path(os.path.realpath(e.path)).parents
        ),
        unique_commits=tuple(f"{sha[:10]} {subject}" for sha, subject in unique),
        dependents=waiting,
    )
    return Observation(facts, where, seen, index, index_key)


def dependents(ledger: Ledger, task: Task) -> list[Task]:
    """Live tasks (other than `task`) whose target is `task`'s branch: its children, and any
    task stacked on it with `--target`."""
    mine = task.branch.removeprefix("refs/heads/")
    return [
        other
        for other in ledger.tasks(task.repo_id, include_retired=False)
        if other.id != task.id and (other.target or "").removeprefix("refs/heads/") == mine
    ]


def moved_checkout(ctx: RepoContext, task: Task) -> Path | None:
    """Where the task's checkout lives on after it was moved by hand (`mv .worktrees/a
    .worktrees/b`), or None: a directory in the worktree area, beside the recorded path or
    in the root, that is the directory laneboard pinned (a move keeps its inode) or whose
    `.git` file leads into the task's admin dir. Not a search of the whole disk: a checkout
    moved further away is not found (git's own `worktree repair <path>` needs it named too)."""
    if not task.admin_name:
        return None
    admin = os.path.realpath(ctx.common_dir / "worktrees" / task.admin_name)
    pinned = task.identity
    recorded = Path(task.worktree_path)
    seen: set[str] = set()
    for parent in (Path(task.area), recorded.parent, ctx.root):
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            place = parent / name
            key = str(place)
            if key in seen or place == recorded:
                continue
            seen.add(key)
            try:
                info = place.lstat()
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                continue
            if pinned is not None and (info.st_dev, info.st_ino) == (
                pinned.dir_dev,
                pinned.dir_ino,
            ):
                return place
            raw = safefs.read_regular(place / ".git", 4096)
            if raw and raw.startswith(b"gitdir: "):
                target = os.fsdecode(raw[8:].strip())
                target = target if os.path.isabs(target) else str(place / target)
                if os.path.realpath(target) == admin:
                    return place
    return None


def _str(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _stat_key(path: Path) -> tuple[int, int, int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _gone(
    ctx: RepoContext,
    task: Task,
    entry: WorktreeEntry | None,
    leases: tuple[str, ...],
    agent: tuple[str, ...],
) -> WorktreeFacts:
    """Facts of a worktree whose directory is gone: what its registration and admin dir (when
    git still lists it) and its branch still hold."""
    admin = admin_dir(ctx, task) if entry is not None else None
    head = admin_head(ctx, admin) if admin is not None else None
    unique, kept = commits_at_stake(ctx, task, admin, head)
    return WorktreeFacts(
        exists=False,
        registered=entry is not None,
        moved_to=_str(moved_checkout(ctx, task)),
        lock=_read_lock(admin) if admin is not None else None,
        leases=leases,
        agent=agent,
        head=head,
        kept_tips=kept,
        unique_commits=tuple(f"{sha[:10]} {subject}" for sha, subject in unique),
    )


def admin_head(ctx: RepoContext, admin: Path) -> str | None:
    """The commit an admin dir's HEAD names (a branch's tip, or a detached commit)."""
    raw = safefs.read_regular(admin / "HEAD", 4096)  # the task's file: no link, no FIFO
    if raw is None:
        return None
    content = raw.decode(errors="surrogateescape").strip()
    if content.startswith("ref: "):
        return ctx.git.ref_target(content[5:])
    return content if ctx.git.has_commit(content) else None


def commits_at_stake(
    ctx: RepoContext, task: Task, admin: Path | None, head: str | None
) -> tuple[list[tuple[str, str]], tuple[str, ...]]:
    """(commits only HEAD or the branch hold, tips of commits only a reflog or per-worktree ref
    holds). The first block removal (the operator must see them, `--force` snapshots them); the
    second are saved in every snapshot without blocking: they are what `commit --amend` or a
    rebase left behind, which git would keep for its reflog's lifetime."""
    tip = ctx.git.branch_tip(task.branch)
    unique = ctx.git.unique_commits([head, tip], exclude=task.branch)
    logged = reflog_tips(ctx, task, admin)
    if not logged:
        return unique, ()
    held = {sha for sha, _ in unique}
    everything = {
        sha for sha, _ in ctx.git.unique_commits([head, tip, *logged], exclude=task.branch)
    }
    kept = tuple(t for t in logged if t in everything and t not in held and t not in (head, tip))
    return unique, kept


def reflog_tips(ctx: RepoContext, task: Task, admin: Path | None) -> list[str]:
    """Commits named by what removal deletes besides the branch: the worktree's HEAD reflog and
    per-worktree refs (`refs/worktree/…`, `refs/bisect/…`, `refs/rewritten/…`, with their
    reflogs), read from its admin dir, and the branch's own reflog. A commit reset away is still
    in a reflog; it must not become unreachable because its reflog went with the worktree."""
    files: list[Path] = [ctx.common_dir / "logs" / "refs" / "heads" / task.branch]
    if admin is not None:
        files.append(admin / "logs" / "HEAD")
        for area in PER_WORKTREE_REFS:
            files += _files_below(admin / area) + _files_below(admin / "logs" / area)
    tips: list[str] = []
    for file in files:
        tips += _shas_in(file)
    return list(dict.fromkeys(t for t in tips if ctx.git.has_commit(t)))


def _files_below(directory: Path) -> list[Path]:
    found: list[Path] = []
    for top, _dirs, names in os.walk(directory):
        found += [Path(top) / name for name in names]
    return found


def _shas_in(file: Path) -> list[str]:
    """Object ids in a loose ref (`<sha>`) or a reflog (`<old> <new> <who> <when>\\t<msg>`)."""
    try:
        lines = file.read_bytes().decode(errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        words = line.split(" ", 2)
        found += [w for w in words[:2] if len(w) == 40 and w != "0" * 40]
    return found


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
    raw = safefs.read_regular(admin / "locked", 65536)
    return None if raw is None else raw.decode(errors="replace").strip()


def _initialized_submodules(worktree: Path, index: IndexListing) -> list[str]:
    """Gitlinks (mode 160000) whose directory holds a `.git`: an initialized submodule."""
    return [path for path in index.gitlinks if os.path.lexists(worktree / path / ".git")]


def branch_uses(ctx: RepoContext, branch: str) -> tuple[list[str], list[str]]:
    """Where `branch` is in use: the worktrees that have it checked out (the root among them),
    and the rebases and bisects working on it anywhere (git lists those worktrees as
    detached)."""
    ref = f"refs/heads/{branch}"
    checkouts = [entry.path for entry in worktree_list(ctx.root) if entry.branch == branch]
    busy: list[str] = []
    for gitdir in [ctx.common_dir, *sorted((ctx.common_dir / "worktrees").glob("*"))]:
        for marker in ("rebase-merge/head-name", "rebase-apply/head-name", "BISECT_START"):
            try:
                content = (gitdir / marker).read_text(errors="replace").strip()
            except OSError:
                continue
            if content in (ref, branch):
                busy.append(f"{marker.split('/')[0].lower()} in {gitdir}")
    return checkouts, busy


def branch_facts(ctx: RepoContext, task: Task, recorded_tip: str | None) -> BranchFacts:
    """Whether the task's branch may be deleted: its tip now, where it is in use, whether its
    commits are reachable from another ref (a snapshot or anchor counts)."""
    ctx.git.refresh()
    tip = ctx.git.branch_tip(task.branch)
    checkouts, busy = branch_uses(ctx, task.branch)
    in_use = [f"checked out at {path}" for path in checkouts] + busy
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
