"""The review loop's values and its pure decisions (docs/review.md, "The review loop"): which
checkpoints to drop when there are too many, whether a comment's line changed under it, and the
one prompt open comments are sent to the agent as.

A checkpoint is the worktree as an agent turn left it (commits, staged, unstaged, untracked,
raw bytes), saved like a discard's snapshot; a comment is anchored to a line of a file as the
reviewed SHA (side `new`) or its merge base (side `old`) has it.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from laneboard.core.domain.values import value


@value
class Checkpoint:
    task_id: str
    n: int
    ref: str
    sha: str
    created_at: float
    turn: str
    """What ended the turn it was taken after (`hook Stop 1790000000.1`, `screen`, `rewind`,
    `exit`, `asked`)."""
    files: int
    """Files that differ from HEAD (staged, unstaged or untracked) when it was taken."""
    bytes: int
    """Their size on disk."""
    pinned: bool = False
    dropped_at: float | None = None


def to_drop(kept: Sequence[Checkpoint], *, keep: int, max_bytes: int) -> list[Checkpoint]:
    """Checkpoints to drop, oldest first, so that at most `keep` are left and their sizes add up
    to at most `max_bytes`; a pinned one is never dropped, nor the newest (the state a rewind
    can always come back to)."""
    live = sorted((c for c in kept if c.dropped_at is None), key=lambda c: c.n)
    if not live:
        return []
    newest = live[-1]
    count, size = len(live), sum(c.bytes for c in live)
    dropped: list[Checkpoint] = []
    for old in live:
        if count <= keep and size <= max_bytes:
            break
        if old.pinned or old is newest:
            continue
        dropped.append(old)
        count, size = count - 1, size - old.bytes
    return dropped


class Side(StrEnum):
    NEW = "new"
    """The line as the reviewed SHA has it."""
    OLD = "old"
    """The line as the merge base has it (a removed line)."""


class CommentState(StrEnum):
    OPEN = "open"
    SENT = "sent"
    RESOLVED = "resolved"


@value
class Comment:
    id: int
    task_id: str
    path: str
    line: int
    side: Side
    sha: str
    """The commit the line was read from when the comment was made."""
    text: str
    line_text: str | None
    """The line's text then (None: the file had no such line)."""
    created_at: float
    state: CommentState
    sent_at: float | None = None
    resolved_at: float | None = None


def outdated(comment: Comment, now: str | None) -> bool:
    """The commented line reads differently now (`now`: its text in the task's current tip or
    worktree, None when the file or the line is gone)."""
    return now != comment.line_text


def prompt(comments: Sequence[tuple[Comment, Sequence[tuple[int, str]]]]) -> str:
    """One prompt for the agent: each comment with its file, line and the lines around it
    (`(number, text)` pairs as the file reads now)."""
    parts = [
        "Review comments from the operator. Address each one, then commit your changes.",
        "",
    ]
    for comment, around in comments:
        parts.append(f"{comment.path}:{comment.line}: {comment.text}")
        for number, text in around:
            mark = ">" if number == comment.line else " "
            parts.append(f"  {mark} {number:>5} | {text}")
        parts.append("")
    return "\n".join(parts).rstrip() + "\n"


def around(lines: Sequence[str], line: int, context: int = 3) -> list[tuple[int, str]]:
    """The numbered lines from `line - context` to `line + context` (1-based) that exist."""
    first, last = max(1, line - context), min(len(lines), line + context)
    return [(n, lines[n - 1]) for n in range(first, last + 1)]
