"""Snapshots: everything a task's worktree holds, saved as one commit before removal, and put
back by `laneboard restore`.

A snapshot is a commit under `refs/laneboard/snapshots/<task-id>/<n>` whose tree is the worktree
as it is (tracked files as on disk, plus untracked files that are not ignored) and whose parents
are HEAD, a commit of the index as staged, and the branch tip when it differs from HEAD (a
detached HEAD). So the snapshot keeps every commit of the task reachable, and restoring it gives
back staged, unstaged and untracked files exactly. It is made with temporary index files: the
user's index, stash and refs are never touched (only the new snapshot ref is written, with a
compare-and-swap that refuses to overwrite).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from core.errors import LaneboardError
from core.git import run_git

IDENTITY = {
    "GIT_AUTHOR_NAME": "laneboard",
    "GIT_AUTHOR_EMAIL": "laneboard@localhost",
    "GIT_COMMITTER_NAME": "laneboard",
    "GIT_COMMITTER_EMAIL": "laneboard@localhost",
}
"""Snapshot commits are laneboard's own; they do not depend on the user having an identity."""


def snapshot_ref(task_id: str, n: int) -> str:
    return f"refs/laneboard/snapshots/{task_id}/{n}"


@dataclass(frozen=True)
class Snapshot:
    """A saved worktree state: the snapshot commit and the commits it was made from."""

    ref: str
    sha: str
    head: str
    index_commit: str
    tip: str | None
    tree: str
    index_tree: str


def _git(
    worktree: Path, *args: str, index: Path | None = None, extra: dict[str, str] | None = None
) -> str:
    env = dict(extra or {})
    if index is not None:
        env["GIT_INDEX_FILE"] = str(index)
    return run_git(list(args), cwd=worktree, read=False, env=env).stdout.decode().strip()


@contextmanager
def _index_copy(gitdir: Path) -> Iterator[Path]:
    """A private copy of a worktree's index (an empty one if it has none)."""
    with tempfile.TemporaryDirectory(prefix="laneboard-index-") as tmp:
        copy = Path(tmp) / "index"
        if (gitdir / "index").exists():
            shutil.copy2(gitdir / "index", copy)
        yield copy


def trees_now(worktree: Path, gitdir: Path) -> tuple[str, str]:
    """(index tree, worktree tree) of the worktree as it is: the staged state, and the files on
    disk including untracked ones that are not ignored."""
    with _index_copy(gitdir) as index:
        index_tree = _git(worktree, "write-tree", index=index)
        _git(worktree, "add", "-A", "--", ".", index=index)
        work_tree = _git(worktree, "write-tree", index=index)
    return index_tree, work_tree


def take(
    worktree: Path,
    gitdir: Path,
    *,
    ref: str,
    head: str,
    tip: str | None,
    message: str,
) -> Snapshot:
    """Save the worktree under `ref` (which must not exist yet)."""
    index_tree, work_tree = trees_now(worktree, gitdir)
    index_commit = _git(
        worktree, "commit-tree", index_tree, "-p", head, "-m", "index", extra=IDENTITY
    )
    parents = ["-p", head, "-p", index_commit]
    if tip and tip != head:
        parents += ["-p", tip]
    sha = _git(worktree, "commit-tree", work_tree, *parents, "-m", message, extra=IDENTITY)
    _git(worktree, "update-ref", ref, sha, "0" * 40)
    return Snapshot(ref, sha, head, index_commit, tip, work_tree, index_tree)


def of_commit(root: Path, *, ref: str, commit: str, message: str) -> Snapshot:
    """A snapshot of a commit alone (the worktree is gone): its tree, nothing staged apart."""
    tree = _git(root, "rev-parse", f"{commit}^{{tree}}")
    index_commit = _git(root, "commit-tree", tree, "-p", commit, "-m", "index", extra=IDENTITY)
    sha = _git(
        root, "commit-tree", tree, "-p", commit, "-p", index_commit, "-m", message, extra=IDENTITY
    )
    _git(root, "update-ref", ref, sha, "0" * 40)
    return Snapshot(ref, sha, commit, index_commit, commit, tree, tree)


def matches(worktree: Path, gitdir: Path, snapshot: Snapshot, head: str | None) -> bool:
    """True when the worktree still holds exactly what `snapshot` saved."""
    return head == snapshot.head and trees_now(worktree, gitdir) == (
        snapshot.index_tree,
        snapshot.tree,
    )


def read(root: Path, ref: str, sha: str) -> Snapshot:
    """The snapshot at `ref`, refusing if the ref no longer points at the recorded `sha`."""
    found = run_git(["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], cwd=root, check=False)
    current = found.stdout.decode().strip()
    if current != sha:
        raise LaneboardError(f"snapshot {ref} is {current or 'missing'}, expected {sha}")
    parents = _git(root, "rev-list", "--parents", "-n", "1", sha).split()[1:]
    if len(parents) not in (2, 3):
        raise LaneboardError(f"{ref} is not a laneboard snapshot ({len(parents)} parents)")
    tree = _git(root, "rev-parse", f"{sha}^{{tree}}")
    index_tree = _git(root, "rev-parse", f"{parents[1]}^{{tree}}")
    tip = parents[2] if len(parents) == 3 else parents[0]
    return Snapshot(ref, sha, parents[0], parents[1], tip, tree, index_tree)


def _paths(worktree: Path, tree: str) -> set[str]:
    out = run_git(["ls-tree", "-r", "-z", "--name-only", tree], cwd=worktree).stdout
    return {p for p in out.decode(errors="surrogateescape").split("\0") if p}


def apply(worktree: Path, snapshot: Snapshot) -> None:
    """Make a fresh worktree (checked out at the snapshot's branch tip) hold the snapshot:
    HEAD at the snapshot's HEAD, the index as staged, the files as they were on disk, untracked
    files untracked. Idempotent, so an interrupted restore can simply run it again."""
    if snapshot.tip and snapshot.tip != snapshot.head:
        _git(worktree, "checkout", "-q", "--detach", snapshot.head)
    with tempfile.TemporaryDirectory(prefix="laneboard-index-") as tmp:
        index = Path(tmp) / "index"
        _git(worktree, "read-tree", snapshot.tree, index=index)
        _git(worktree, "checkout-index", "-a", "-f", index=index)
    gone = (_paths(worktree, snapshot.head) | _paths(worktree, snapshot.index_tree)) - _paths(
        worktree, snapshot.tree
    )
    for relative in sorted(gone):
        target = worktree / relative
        if target.is_symlink() or target.is_file():
            target.unlink()
    _git(worktree, "read-tree", snapshot.index_tree)
    run_git(["update-index", "-q", "--refresh"], cwd=worktree, read=False, check=False)


def next_number(existing: list[int]) -> int:
    return max(existing, default=0) + 1
