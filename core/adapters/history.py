"""Reads of a task's history for review and the conflict radar, with the git CLI.

Every diff runs with `--no-ext-diff --no-textconv --no-color`: a review never runs a driver the
user (or an agent, through `.gitattributes`) configured. `git merge-tree --write-tree` writes
objects only: no checkout, no index, no ref. Reads pass `GIT_OPTIONAL_LOCKS=0` (`run_git`).
"""

from __future__ import annotations

from pathlib import Path

from laneboard.core.adapters.git import run_git
from laneboard.core.domain.errors import GitError
from laneboard.core.domain.review import (
    CommitInfo,
    FileChange,
    MergeCheck,
    Pending,
    parse_diff,
    parse_log,
    parse_merge_tree,
    parse_pending,
)

DIFF_OPTIONS = ("--no-ext-diff", "--no-textconv", "--no-color", "-M")
LOG_FORMAT = "--format=%H%x1f%an%x1f%ae%x1f%at%x1f%s"


def branch_tips(root: Path) -> dict[str, str]:
    """Every local branch's tip (name without `refs/heads/`), from one `git for-each-ref`
    (cheaper than loading pygit2 for a command that needs nothing else from it)."""
    out = run_git(
        ["for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/"], cwd=root
    ).stdout.decode(errors="surrogateescape")
    tips = {}
    for line in out.splitlines():
        sha, _, ref = line.partition(" ")
        tips[ref.removeprefix("refs/heads/")] = sha
    return tips


def merge_base(root: Path, a: str, b: str) -> str | None:
    """The best common ancestor of `a` and `b`, or None when their histories are unrelated."""
    found = run_git(["merge-base", a, b], cwd=root, check=False)
    sha = found.stdout.decode().strip()
    return sha if found.returncode == 0 and sha else None


def commits(root: Path, base: str, tip: str) -> tuple[CommitInfo, ...]:
    """The commits reachable from `tip` and not from `base`, newest first."""
    out = run_git(
        ["log", "-z", "--no-decorate", "--no-show-signature", LOG_FORMAT, f"{base}..{tip}"],
        cwd=root,
    ).stdout
    return parse_log(out)


def changes(root: Path, base: str, tip: str) -> tuple[FileChange, ...]:
    """The files changed from `base` to `tip`, with status and the +/- counts of
    `git diff --numstat -M`."""
    out = run_git(
        ["diff", "--raw", "--numstat", "-z", "--no-abbrev", *DIFF_OPTIONS, base, tip],
        cwd=root,
    ).stdout
    return parse_diff(out)


def patch(root: Path, base: str, tip: str, paths: tuple[str, ...] = ()) -> bytes:
    """The unified diff from `base` to `tip` (of `paths` only, when given: taken literally,
    so a name with `*` or `:` names just that file)."""
    spec = ["--", *(f":(literal){p}" for p in paths)] if paths else []
    return run_git(["diff", *DIFF_OPTIONS, base, tip, *spec], cwd=root).stdout


def ahead_behind(root: Path, target: str, tip: str) -> tuple[int, int]:
    """(commits on `tip` not on `target`, commits on `target` not on `tip`)."""
    out = run_git(["rev-list", "--left-right", "--count", f"{target}...{tip}"], cwd=root).stdout
    behind, ahead = out.decode().split()
    return int(ahead), int(behind)


def pending(worktree: Path) -> tuple[tuple[Pending, ...], tuple[str, ...]]:
    """The worktree's uncommitted tracked paths and its untracked ones (every untracked file,
    whatever `status.showUntrackedFiles` says; ignored ones are not asked for)."""
    out = run_git(
        ["status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"],
        cwd=worktree,
    ).stdout
    return parse_pending(out)


def merge(root: Path, ours: str, theirs: str) -> tuple[str | None, MergeCheck]:
    """Merge `theirs` into `ours` with git's own merge (`merge-tree --write-tree`, git >= 2.38),
    which writes the result's objects and nothing else: the result's tree (None when it
    conflicts) and whether, and in which files, it conflicts."""
    found = run_git(
        ["merge-tree", "--write-tree", "--name-only", "-z", "--no-messages", ours, theirs],
        cwd=root,
        check=False,
    )
    if found.returncode not in (0, 1):
        if b"usage:" in found.stderr:
            raise GitError("merging needs git 2.38 or newer (git merge-tree --write-tree)")
        return None, parse_merge_tree(found.stderr, found.returncode)
    check = parse_merge_tree(found.stdout, found.returncode)
    tree = found.stdout.split(b"\0")[0].decode().strip()
    return (tree if check.clean else None), check


SCRATCH_IDENTITY = {
    "GIT_AUTHOR_NAME": "laneboard",
    "GIT_AUTHOR_EMAIL": "laneboard@localhost",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_NAME": "laneboard",
    "GIT_COMMITTER_EMAIL": "laneboard@localhost",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
}
"""A fixed identity and date for the radar's scratch commits, so the same trees always make the
same commit ids (and a user without `user.name` can still run the radar)."""


def trees(root: Path, revs: list[str]) -> list[str]:
    """The tree id of each of `revs`, from one `git rev-parse`."""
    out = run_git(["rev-parse", *(f"{rev}^{{tree}}" for rev in revs)], cwd=root).stdout
    return out.decode().split()


def merge_at(root: Path, base: str, ours: str, theirs: str) -> tuple[str | None, MergeCheck]:
    """Merge the trees of `ours` and `theirs` (commits or trees) with `base` as their merge
    base, whatever their histories say: `base` plus the changes from `base` to each side.

    git 2.38's `merge-tree` has no `--merge-base`, so each side becomes an unreferenced commit
    whose only parent is `base` (objects only, no ref; fixed identity and date, so the same
    inputs make the same ids) and those are merged."""
    made = []
    for side in (ours, theirs):
        found = run_git(
            [
                "commit-tree",
                "--no-gpg-sign",
                "-p",
                base,
                "-m",
                "laneboard radar",
                f"{side}^{{tree}}",
            ],
            cwd=root,
            env=SCRATCH_IDENTITY,
        )
        made.append(found.stdout.decode().strip())
    return merge(root, made[0], made[1])
