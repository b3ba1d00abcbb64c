"""Review of a task (DESIGN.md section 7): its commits and changed files since the merge base
with its target, each file's diff, what is not committed yet, and the pinned reviewed SHA.

What the commits hold is cached in the ledger by (merge base, tip): neither id ever names
anything else, so the cache is never wrong and never needs clearing. What the worktree holds
uncommitted is read fresh each time. Marking pins committed work only: the branch tip at that
moment, journalled with the time; finalize integrates exactly that commit.
"""

from __future__ import annotations

import stat
import time
from pathlib import Path

from laneboard.core.adapters import history
from laneboard.core.adapters.git import run_git
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.adapters.reviewstore import ReviewStore
from laneboard.core.adapters.safefs import Below
from laneboard.core.domain.errors import GitError, LaneboardError
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.review import Pending, Review, Since
from laneboard.core.domain.reviewloop import (
    Comment,
    CommentState,
    Side,
    around,
    outdated,
    prompt,
)
from laneboard.core.operations.steps import confinement
from laneboard.core.operations.steps.commits import committed

MAX_COMMENTED = 8 * 1024 * 1024
"""A commented file larger than this is not read back (its comment cannot be checked)."""


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


# --- since the last review ---------------------------------------------------------------------


def since(ctx: RepoContext, ledger: Ledger, task: Task, seen: Review) -> Since | None:
    """What changed since the reviewed SHA, when there is one and the tip moved: the commits
    on top of it, or, after a rebase, the commits compared one by one, those unchanged left
    out."""
    before = task.reviewed_sha
    if before is None or before == seen.tip:
        return None
    if ctx.git.is_ancestor(before, seen.tip):
        return Since(before, "interdiff", committed=committed(ctx, ledger, before, seen.tip))
    old_base = (
        history.merge_base(ctx.root, seen.target_sha, before) if seen.target_sha else None
    ) or task.base_sha
    found = run_git(
        ["range-diff", "--no-color", f"{old_base}..{before}", f"{seen.merge_base}..{seen.tip}"],
        cwd=ctx.root,
        check=False,
    )
    if found.returncode != 0:
        raise GitError(f"git range-diff failed: {found.stderr.decode(errors='replace').strip()}")
    return Since(
        before, "range-diff", range_diff=changed_only(found.stdout.decode(errors="replace"))
    )


def changed_only(range_diff: str) -> str:
    """`git range-diff` output without the pairs it marks unchanged (`=`)."""
    kept: list[str] = []
    keep = True
    for line in range_diff.splitlines():
        header = line[:1].isdigit() or line.startswith("-:")
        if header:
            parts = line.split()
            keep = len(parts) > 2 and parts[2] != "="
        if keep:
            kept.append(line)
    return "\n".join(kept) + ("\n" if kept else "")


# --- comments ----------------------------------------------------------------------------------


def add_comment(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    *,
    where: str,
    text: str,
    side: Side = Side.NEW,
) -> Comment:
    """Anchor a comment to `where` (`PATH:LINE`) as the reviewed SHA (else the tip) has it, or
    as the merge base has it for side `old`. Refused when that line does not exist."""
    path, _, number = where.rpartition(":")
    if not path or not number.isdigit() or int(number) < 1:
        raise LaneboardError(f"--comment {where!r}: give PATH:LINE (a line number from 1)")
    if not text.strip():
        raise LaneboardError("--comment: the comment's text is empty")
    seen = review(ctx, ledger, task)
    sha = seen.merge_base if side is Side.OLD else (task.reviewed_sha or seen.tip)
    lines = _lines_at(ctx, sha, path)
    line = int(number)
    if lines is None or line > len(lines):
        raise LaneboardError(f"{path} has no line {line} at {sha[:12]}")
    return ReviewStore(ledger.database).add_comment(
        task.id, task.repo_id, actor, path=path, line=line, side=side, sha=sha, text=text,
        line_text=lines[line - 1],
    )  # fmt: skip


def comments(ledger: Ledger, task: Task, *, resolved: bool = False) -> list[tuple[Comment, bool]]:
    """The task's comments (open and sent; with `resolved`, all), each with whether its line
    reads differently now in the task's worktree (outdated)."""
    found = ReviewStore(ledger.database).comments(task.id, resolved=resolved)
    files: dict[str, list[str] | None] = {}
    marked = []
    for comment in found:
        if comment.side is Side.OLD:
            marked.append((comment, False))
            continue
        if comment.path not in files:
            files[comment.path] = _lines_in_worktree(task, comment.path)
        lines = files[comment.path]
        now = lines[comment.line - 1] if lines is not None and comment.line <= len(lines) else None
        marked.append((comment, outdated(comment, now)))
    return marked


def comments_prompt(ledger: Ledger, task: Task) -> tuple[str, list[Comment]]:
    """The one prompt the open comments are sent to the agent as (each with its file, line and
    the lines around it as the worktree has them now), and those comments."""
    waiting = [c for c, _ in comments(ledger, task) if c.state is CommentState.OPEN]
    if not waiting:
        raise LaneboardError(f"{task.name} has no open comment to send")
    shown = []
    for comment in waiting:
        lines = _lines_in_worktree(task, comment.path) or []
        shown.append((comment, around(lines, comment.line)))
    return prompt(shown), waiting


def mark_comments(
    ledger: Ledger, task: Task, found: list[Comment], actor: Actor, state: CommentState
) -> None:
    ReviewStore(ledger.database).mark_comments(found, task.repo_id, actor, state)


def resolve(ledger: Ledger, task: Task, comment_id: int, actor: Actor) -> Comment:
    store = ReviewStore(ledger.database)
    found = store.comment(comment_id)
    if found.task_id != task.id:
        raise LaneboardError(f"comment #{comment_id} is not {task.name}'s")
    if found.state is CommentState.RESOLVED:
        return found
    store.mark_comments([found], task.repo_id, actor, CommentState.RESOLVED)
    return store.comment(comment_id)


def _lines_at(ctx: RepoContext, sha: str, path: str) -> list[str] | None:
    shown = run_git(["cat-file", "blob", f"{sha}:{path}"], cwd=ctx.root, check=False)
    if shown.returncode != 0:
        return None
    return shown.stdout.decode(errors="replace").splitlines()


def _lines_in_worktree(task: Task, path: str) -> list[str] | None:
    """The file's lines as the worktree holds them now (read without following a link)."""
    worktree = Path(task.worktree_path)
    if not worktree.is_dir():
        return None
    try:
        with Below(worktree) as below:
            info = below.lstat(path)
            if info is None or not stat.S_ISREG(info.st_mode) or info.st_size > MAX_COMMENTED:
                return None
            data = b"".join(below.chunks(path))
    except OSError:
        return None
    return data.decode(errors="replace").splitlines()
