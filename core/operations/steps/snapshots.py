"""Saving a task's worktree as a snapshot: commits, staged, unstaged and untracked files, raw
bytes, as a commit under `refs/laneboard/snapshots/<task>/<n>`, kept in the vault and recorded in
the ledger before anything that relies on it (a removal, an undo) goes on. Reads the worktree
only; never touches its HEAD, index or files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from laneboard.core.adapters import snapshot, vault
from laneboard.core.adapters.git import index_listing, status
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor, Task
from laneboard.core.operations.steps import confinement
from laneboard.core.operations.steps.facts import admin_dir


def next_ref(ctx: RepoContext, ledger: Ledger, task: Task) -> tuple[int, str]:
    """The number and ref of the task's next snapshot (past every one recorded or present)."""
    prefix = f"refs/laneboard/snapshots/{task.id}/"
    existing = [n for n, _, _ in ledger.snapshots(task.id)]
    existing += [
        int(r.rsplit("/", 1)[1])
        for r in ctx.git.refs()
        if r.startswith(prefix) and r.rsplit("/", 1)[1].isdigit()
    ]
    n = snapshot.next_number(existing)
    return n, snapshot.snapshot_ref(task.id, n)


def message(task: Task, n: int) -> str:
    return f"laneboard snapshot {n} of task {task.name} ({task.id})"


def record(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    n: int,
    saved: snapshot.Snapshot,
    **data: Any,
) -> snapshot.Snapshot:
    """Keep a snapshot in the vault (its own copy, out of every sandbox's and every gc's
    reach), then record it in the ledger (and journal it). A snapshot the vault cannot take is
    refused: nothing that relies on it (a removal) goes on."""
    vault.keep_ref(ctx.repo.id, ctx.common_dir, saved.sha, saved.ref)
    ledger.add_snapshot(
        task.id,
        task.repo_id,
        n,
        saved.ref,
        saved.sha,
        actor,
        {
            "head": saved.head,
            "index_commit": saved.index_commit,
            "tip": saved.tip,
            "tree": saved.tree,
            "index_tree": saved.index_tree,
            "extras": list(saved.extras),
            **data,
        },
    )
    return saved


def save_capture(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    captured: snapshot.Capture,
    head: str,
    extras: tuple[str, ...] = (),
) -> snapshot.Snapshot:
    n, ref = next_ref(ctx, ledger, task)
    saved = snapshot.save(
        ctx.git.handle,
        ctx.root,
        captured,
        ref=ref,
        head=head,
        tip=ctx.git.branch_tip(task.branch),
        extras=extras,
        message=message(task, n),
    )
    return record(ctx, ledger, task, actor, n, saved)


def capture_worktree(ctx: RepoContext, task: Task) -> tuple[snapshot.Capture, str]:
    """The task's (verified) worktree captured as it is now (objects written, no ref), and its
    HEAD commit. Reads only; waits for the task's new objects to be moved in first."""
    confinement.settle(ctx.common_dir, task.id)
    path = Path(task.worktree_path)
    admin = admin_dir(ctx, task)
    if admin is None:
        raise LaneboardError(f"{path} has no admin dir to read its index from")
    seen = status(path, ignored=False)
    if seen.head is None:
        raise LaneboardError(f"{path} has no HEAD commit to save its files on top of")
    # The whole index is listed only when a conversion could make an unchanged file's bytes
    # differ from its blob (tens of thousands of entries, at every agent turn otherwise).
    others = [*seen.staged, *seen.unstaged, *seen.untracked]
    possible = snapshot.may_convert(path, ctx.common_dir, others, admin=admin, head=seen.head)
    tracked = index_listing(path).files if possible else ()
    captured = snapshot.capture(
        ctx.git.handle,
        path,
        admin,
        seen,
        common_dir=ctx.common_dir,
        tracked_files=tracked,
    )
    return captured, seen.head


def save_worktree(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> snapshot.Snapshot:
    """Snapshot the task's (verified) worktree as it is now, e.g. before a rollback removes it."""
    captured, head = capture_worktree(ctx, task)
    return save_capture(ctx, ledger, task, actor, captured, head)
