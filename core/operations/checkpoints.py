"""Checkpoints and rewind (docs/review.md, "The review loop").

A checkpoint is taken at the end of an agent turn (the controller sees the turn end: a hook
event, or the screen settling when the agent has no hooks), on exit, on request, and before a
rewind. It is the same capture as a discard's snapshot (commits, staged, unstaged, untracked,
raw bytes) committed under `refs/laneboard/checkpoints/<task id>/<n>` and kept in the vault;
taking one reads the worktree and never touches its HEAD, index or files. A worktree exactly as
the last checkpoint holds it makes none. The count and size are bounded by config
(`checkpoints.keep`, `checkpoints.max_mb`): the oldest go first, never a pinned one nor the
newest.

A rewind brings the worktree back to checkpoint N under the task's worktree lane, the agent not
working: it first takes a checkpoint of the worktree as it is (so the rewind itself can be
undone by rewinding to that one), refuses when a file it would write or remove is in no
checkpoint (an ignored file), then writes the files (never through a link) and the index, and
moves HEAD (the task's branch, by compare-and-swap) to the checkpoint's. Each step journalled.
"""

from __future__ import annotations

import time
from pathlib import Path

import pygit2

from laneboard.core.adapters import snapshot, vault, vaultcopy
from laneboard.core.adapters.git import delete_ref_if, index_listing, run_git
from laneboard.core.adapters.integrate import update_ref
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.adapters.reviewstore import ReviewStore
from laneboard.core.domain.agents import AgentState
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import LeaseKind
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.reviewloop import Checkpoint, to_drop
from laneboard.core.domain.runtime import Runtime, pane_of, pane_state
from laneboard.core.operations.steps import agentstate
from laneboard.core.operations.steps.snapshots import capture_worktree

PREFIX = "refs/laneboard/checkpoints/"


def checkpoint_ref(task_id: str, n: int) -> str:
    return f"{PREFIX}{task_id}/{n}"


def listing(ledger: Ledger, task: Task) -> list[Checkpoint]:
    """The task's checkpoints that are kept, oldest first."""
    return ReviewStore(ledger.database).checkpoints(task.id)


def take(
    ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, *, turn: str
) -> Checkpoint | None:
    """Save the task's worktree as its next checkpoint; None when it is exactly as the last
    checkpoint holds it. Then drop what the bounds no longer allow."""
    store = ReviewStore(ledger.database)
    captured, head = capture_worktree(ctx, task)
    kept = store.checkpoints(task.id)
    if kept and _holds(ctx, kept[-1], captured, head):
        return None
    n = store.next_number(task.id)
    ref = checkpoint_ref(task.id, n)
    ctx.git.refresh()
    saved = snapshot.save(
        ctx.git.handle,
        ctx.root,
        captured,
        ref=ref,
        head=head,
        tip=ctx.git.branch_tip(task.branch),
        message=f"laneboard checkpoint {n} of task {task.name} ({task.id}): {turn}",
    )
    like = kept[-1].ref if kept else None  # most of the tree is there already
    vaultcopy.keep_ref(ctx.repo.id, ctx.git.handle, saved.sha, ref, like=like)
    facts = captured.status
    files = len({*facts.staged, *facts.unstaged, *facts.untracked})
    size = sum(key[2] for _path, key in captured.read if key is not None)
    found = store.add_checkpoint(
        Checkpoint(task.id, n, ref, saved.sha, time.time(), turn, files, size),
        task.repo_id,
        actor,
    )
    prune(ctx, ledger, task, actor)
    return found


def _holds(ctx: RepoContext, last: Checkpoint, captured: snapshot.Capture, head: str) -> bool:
    """The checkpoint `last` holds exactly `captured` on `head` (read in this process: its
    tree, its HEAD parent and its index commit's tree)."""
    found = ctx.git.handle.get(last.sha)
    if not isinstance(found, pygit2.Commit) or len(found.parent_ids) < 2:
        return False
    index = ctx.git.handle.get(found.parent_ids[1])
    if not isinstance(index, pygit2.Commit):
        return False
    return (str(found.tree_id), str(index.tree_id), str(found.parent_ids[0])) == (
        captured.tree,
        captured.index_tree,
        head,
    )


def prune(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> list[Checkpoint]:
    """Drop the oldest checkpoints the bounds no longer allow (never a pinned one, never the
    newest); each ref is deleted by compare-and-swap, its row kept with `dropped_at`."""
    store = ReviewStore(ledger.database)
    bounds = ctx.settings.checkpoints
    dropped = to_drop(
        store.checkpoints(task.id), keep=bounds.keep, max_bytes=int(bounds.max_mb * 1024 * 1024)
    )
    for old in dropped:
        delete_ref_if(ctx.root, old.ref, old.sha)
        vault.drop_ref(ctx.repo.id, old.ref, old.sha)
        store.set_checkpoint(old, task.repo_id, actor, "checkpoint.dropped", dropped_at=time.time())
    return dropped


def pin(ledger: Ledger, task: Task, n: int, actor: Actor, pinned: bool) -> Checkpoint:
    """Pin (or unpin) checkpoint `n`: a pinned checkpoint is never dropped by the bounds."""
    store = ReviewStore(ledger.database)
    found = _numbered(store, task, n)
    store.set_checkpoint(
        found, task.repo_id, actor, "checkpoint.pinned" if pinned else "checkpoint.unpinned",
        pinned=int(pinned),
    )  # fmt: skip
    return _numbered(store, task, n)


def _numbered(store: ReviewStore, task: Task, n: int) -> Checkpoint:
    for found in store.checkpoints(task.id):
        if found.n == n:
            return found
    raise LaneboardError(f"{task.name} has no checkpoint {n} (`laneboard checkpoints {task.name}`)")


def rewind(
    ctx: RepoContext,
    ledger: Ledger,
    runtime: Runtime,
    task: Task,
    n: int | None,
    actor: Actor,
) -> tuple[Checkpoint, Checkpoint]:
    """Bring the worktree back to checkpoint `n` (default: the one before the newest). Returns
    the checkpoint of the state it left (rewind to it to undo) and the one it went back to."""
    store = ReviewStore(ledger.database)
    kept = store.checkpoints(task.id)
    if n is None:
        if len(kept) < 2:
            raise LaneboardError(f"{task.name} has no earlier checkpoint to rewind to")
        n = kept[-2].n
    target = _numbered(store, task, n)
    _refuse_working(ctx, runtime, task)
    argv = ["laneboard", "rewind", task.name, str(n)]
    with ctx.lane(ledger, task.id, LeaseKind.REWIND, argv):
        verdict = ctx.verify(task)
        if not verdict.ok:
            raise LaneboardError(f"{task.name}: refusing to rewind: {verdict}")
        _refuse_working(ctx, runtime, task)
        hidden = index_listing(Path(task.worktree_path)).hidden
        if hidden:  # git status does not look at them: no checkpoint holds their changes
            raise LaneboardError(
                f"{task.name}: {hidden[0]} is marked assume-unchanged or skip-worktree; a rewind "
                "could overwrite what it holds (`git update-index --no-assume-unchanged "
                "--no-skip-worktree` it first)"
            )
        wanted = snapshot.read(ctx.root, target.ref, target.sha)
        before = take(ctx, ledger, task, actor, turn="before rewind")
        if before is None:
            before = store.checkpoints(task.id)[-1]  # the worktree is exactly the newest one
        now = snapshot.read(ctx.root, before.ref, before.sha)
        ledger.append_event(
            task.id, task.repo_id, "rewind.intent", actor,
            {"to": target.n, "from": before.n, "head": now.head, "to_head": wanted.head},
        )  # fmt: skip
        worktree = Path(task.worktree_path)
        snapshot.apply_over(worktree, now.tree, wanted, common_dir=ctx.common_dir)
        _move_head(ctx, task, worktree, now.head, wanted.head)
        ledger.append_event(
            task.id, task.repo_id, "rewind.done", actor, {"to": target.n, "from": before.n}
        )
    return before, target


def _refuse_working(ctx: RepoContext, runtime: Runtime, task: Task) -> None:
    """A rewind waits for the agent's turn to end: refused while it works."""
    seen = pane_state(runtime, pane_of(task))
    if seen is None or not seen.alive:
        return
    state = agentstate.observe_all(lambda _task: ctx.settings, [task], runtime).get(task.id)
    if state is None or state.state is AgentState.WORKING:
        doing = state.state.value if state is not None else "running"
        raise LaneboardError(f"{task.name}: its agent is {doing}; rewind once its turn ended")


def _move_head(ctx: RepoContext, task: Task, worktree: Path, old: str, new: str) -> None:
    """HEAD to `new`: the task's branch by compare-and-swap when HEAD is on it, else HEAD
    itself (detached)."""
    if old == new:
        return
    branch = f"refs/heads/{task.branch.removeprefix('refs/heads/')}"
    attached = run_git(["symbolic-ref", "-q", "HEAD"], cwd=worktree, check=False)
    if attached.stdout.decode().strip() == branch:
        problem = update_ref(ctx.root, branch, new, old, f"laneboard: rewind {task.name}")
    else:
        problem = update_ref(worktree, "HEAD", new, old, f"laneboard: rewind {task.name}")
    if problem is not None:
        raise LaneboardError(f"{task.name}: HEAD moved during the rewind ({problem})")
