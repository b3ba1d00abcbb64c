"""What review shows and the radar predicts, as values, and the parsers of git's output for them
(DESIGN.md section 7).

Pure: the adapters run `git diff --raw --numstat -z`, `git log -z` and `git merge-tree
--write-tree`; this module turns their bytes into values and never runs anything. Paths are
`str` decoded with `surrogateescape`, so a non-UTF-8 name survives the round trip.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from laneboard.core.domain.values import field, value

SUBMODULE_MODE = "160000"
HUGE_LINES = 5000
"""A file with more changed lines than this is summarized, not dumped, by `review --patch`."""


class Change(StrEnum):
    """How a file changed between the merge base and the tip (git's status letters)."""

    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    RENAMED = "renamed"
    COPIED = "copied"
    TYPE_CHANGED = "type-changed"
    UNMERGED = "unmerged"


_LETTERS = {
    "A": Change.ADDED,
    "M": Change.MODIFIED,
    "D": Change.DELETED,
    "R": Change.RENAMED,
    "C": Change.COPIED,
    "T": Change.TYPE_CHANGED,
    "U": Change.UNMERGED,
}


@value
class FileChange:
    """One changed file: its status, its +/- line counts (None for a binary file: git counts
    no lines there), its modes and whether it is a submodule."""

    path: str
    change: Change
    old_path: str | None = None
    """The path it had at the merge base, for a rename or copy."""
    similarity: int | None = None
    """Percent, for a rename or copy."""
    added: int | None = None
    removed: int | None = None
    old_mode: str = "000000"
    new_mode: str = "000000"

    @property
    def binary(self) -> bool:
        return self.added is None and not self.submodule

    @property
    def submodule(self) -> bool:
        return SUBMODULE_MODE in (self.old_mode, self.new_mode)

    @property
    def mode_changed(self) -> bool:
        """The file's mode changed (the executable bit, or a file became a link) and it existed
        on both sides."""
        return "000000" not in (self.old_mode, self.new_mode) and self.old_mode != self.new_mode

    @property
    def huge(self) -> bool:
        return (self.added or 0) + (self.removed or 0) > HUGE_LINES

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "status": self.change.value,
            "old_path": self.old_path,
            "similarity": self.similarity,
            "added": self.added,
            "removed": self.removed,
            "binary": self.binary,
            "submodule": self.submodule,
            "mode_changed": self.mode_changed,
            "old_mode": self.old_mode,
            "new_mode": self.new_mode,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileChange:
        return cls(
            path=data["path"],
            change=Change(data["status"]),
            old_path=data["old_path"],
            similarity=data["similarity"],
            added=data["added"],
            removed=data["removed"],
            old_mode=data["old_mode"],
            new_mode=data["new_mode"],
        )


@value
class CommitInfo:
    sha: str
    subject: str
    author: str
    email: str
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "sha": self.sha,
            "subject": self.subject,
            "author": self.author,
            "email": self.email,
            "at": self.at,
        }


@value
class Committed:
    """What the commits between a merge base and a tip hold: never changes for the same pair,
    so it is cached by (merge base, tip)."""

    commits: tuple[CommitInfo, ...] = ()
    """Newest first."""
    files: tuple[FileChange, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "commits": [c.as_dict() for c in self.commits],
            "files": [f.as_dict() for f in self.files],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Committed:
        return cls(
            commits=tuple(CommitInfo(**c) for c in data["commits"]),
            files=tuple(FileChange.from_dict(f) for f in data["files"]),
        )


@value
class Pending:
    """One uncommitted path of the worktree: its two-letter `git status` code (`M.`, `.M`,
    `??` for untracked)."""

    path: str
    code: str


@value
class Review:
    """A task's work since the merge base with its target, as the operator reviews it."""

    target: str | None
    target_sha: str | None
    merge_base: str
    tip: str
    committed: Committed
    ahead: int
    behind: int
    uncommitted: tuple[Pending, ...] = ()
    untracked: tuple[str, ...] = ()
    reviewed_sha: str | None = None
    reviewed_at: float | None = None
    worktree_problem: str | None = None
    """Why the worktree's uncommitted state could not be read (it is gone), else None."""

    @property
    def reviewed_current(self) -> bool:
        """The reviewed SHA is the branch tip now."""
        return self.reviewed_sha is not None and self.reviewed_sha == self.tip


@value
class Since:
    """What changed since the operator last reviewed the task: the commits from the reviewed
    SHA to the tip (`interdiff`), or, when the branch was rebased since, the commits compared
    one by one (`range-diff`: `git range-diff`'s own lines, unchanged commits left out)."""

    reviewed: str
    kind: str
    """`interdiff` or `range-diff`."""
    committed: Committed | None = None
    range_diff: str | None = None


@value
class MergeCheck:
    """Whether merging two commits conflicts, and in which files (from `git merge-tree`)."""

    clean: bool
    files: tuple[str, ...] = ()
    problem: str | None = None
    """Why no merge could be computed (unrelated histories), else None."""


@value
class Overlap:
    """One line of the conflict radar: a task against its target (`other` None) or against
    another task of the same repo."""

    task: str
    task_id: str
    other: str | None
    other_id: str | None
    ours: str
    theirs: str
    check: MergeCheck


@value
class Radar:
    """Every live task of one repo against its target and against each other."""

    repo_root: str
    overlaps: tuple[Overlap, ...] = field(default_factory=tuple)

    def conflicts_of(self, task_id: str) -> tuple[Overlap, ...]:
        return tuple(
            o for o in self.overlaps if not o.check.clean and task_id in (o.task_id, o.other_id)
        )


# --- parsers --------------------------------------------------------------------------------


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="surrogateescape")


def parse_diff(raw: bytes) -> tuple[FileChange, ...]:
    """The output of `git diff --raw --numstat -z -M --no-abbrev A B`: first every raw record
    (`:<old mode> <new mode> <old> <new> <status>\\0<path>\\0[<new path>\\0]`), then every
    numstat record (`<added>\\t<removed>\\t<path>\\0`, or for a rename
    `<added>\\t<removed>\\t\\0<old>\\0<new>\\0`), in the same order."""
    parts = raw.split(b"\0")
    files: list[dict[str, Any]] = []
    i = 0
    while i < len(parts) and parts[i].startswith(b":"):
        old_mode, new_mode, _old, _new, status = parts[i][1:].decode().split(" ")
        letter, score = status[0], status[1:]
        change = _LETTERS.get(letter, Change.MODIFIED)
        entry: dict[str, Any] = {
            "change": change,
            "old_mode": old_mode,
            "new_mode": new_mode,
            "similarity": int(score) if score and letter in "RC" else None,
        }
        if letter in "RC":
            entry["old_path"], entry["path"] = _text(parts[i + 1]), _text(parts[i + 2])
            i += 3
        else:
            entry["path"] = _text(parts[i + 1])
            i += 2
        files.append(entry)
    for entry in files:
        added, removed, path = parts[i].split(b"\t", 2)
        i += 3 if path == b"" else 1  # a rename's numstat names both paths after it
        if added != b"-":
            entry["added"], entry["removed"] = int(added), int(removed)
    return tuple(FileChange(**entry) for entry in files)


def parse_log(raw: bytes) -> tuple[CommitInfo, ...]:
    """The output of `git log -z --format=%H%x1f%an%x1f%ae%x1f%at%x1f%s`."""
    commits = []
    for record in raw.split(b"\0"):
        record = record.strip(b"\n")
        if not record:
            continue
        sha, author, email, at, subject = _text(record).split("\x1f", 4)
        commits.append(CommitInfo(sha, subject, author, email, float(at)))
    return tuple(commits)


def parse_merge_tree(raw: bytes, code: int) -> MergeCheck:
    """The output of `git merge-tree --write-tree --name-only -z --no-messages A B` and its exit
    code (0 clean, 1 conflicted): the tree id, then each conflicted path."""
    if code not in (0, 1):
        lines = [line for line in _text(raw).splitlines() if line.strip()]
        return MergeCheck(False, (), lines[-1] if lines else f"git merge-tree exited {code}")
    names = [_text(p) for p in raw.split(b"\0")[1:] if p]
    return MergeCheck(code == 0, tuple(dict.fromkeys(names)))


def parse_pending(raw: bytes) -> tuple[tuple[Pending, ...], tuple[str, ...]]:
    """`git status --porcelain=v1 -z --untracked-files=all`: the uncommitted tracked paths
    (with their code, `.` for an unchanged side) and the untracked ones, apart."""
    parts = raw.split(b"\0")
    pending: list[Pending] = []
    untracked: list[str] = []
    i = 0
    while i < len(parts):
        entry = parts[i]
        i += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2].decode(), _text(entry[3:])
        if code == "??":
            untracked.append(path)
            continue
        if code[0] in "RC":
            i += 1  # the original path follows
        pending.append(Pending(path, code.replace(" ", ".")))
    return tuple(pending), tuple(untracked)
