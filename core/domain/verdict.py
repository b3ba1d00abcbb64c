"""The verdict of a worktree's verification (DESIGN.md section 5), as a value: accepted, or
rejected with one named reason and the fact behind it. `core.adapters.verify` makes it from
filesystem reads."""

from __future__ import annotations

from enum import StrEnum

from laneboard.core.domain.identity import Identity
from laneboard.core.domain.values import value


class Reason(StrEnum):
    """Why a worktree was rejected."""

    MISSING = "missing"
    """The worktree directory (or its `.git`) does not exist."""
    NOT_A_DIRECTORY = "not-a-directory"
    """The worktree path is a file or something else, not a directory."""
    SYMLINKED = "symlinked"
    """A path component below the area, the worktree dir, its `.git` or its admin dir is a
    symbolic link."""
    OUTSIDE_AREA = "outside-area"
    """The worktree does not resolve to a directory strictly inside the repo's worktree area."""
    GITFILE_NOT_REGULAR = "gitfile-not-regular"
    """`.git` is a directory (a clone planted in the area) or another non-regular file."""
    GITFILE_TOO_LARGE = "gitfile-too-large"
    """`.git` is over 1 MiB; git never writes such a file."""
    GITFILE_MALFORMED = "gitfile-malformed"
    """`.git` is not `gitdir: <path>`."""
    GITDIR_MISMATCH = "gitdir-mismatch"
    """`gitdir:` does not resolve to `<common dir>/worktrees/<admin name>` of this repo."""
    COMMONDIR_MISMATCH = "commondir-mismatch"
    """The admin dir's `commondir` does not resolve to the repo's common dir."""
    BACKLINK_MISMATCH = "backlink-mismatch"
    """The admin dir's `gitdir` does not point back at this worktree's `.git` file."""
    IDENTITY_CHANGED = "identity-changed"
    """Device or inode of the worktree dir or `.git` differ from the pinned identity."""


@value
class Verdict:
    """The outcome of one verification. On acceptance it carries what was observed, so the
    caller can pin the identity and admin name right after creating a worktree."""

    ok: bool
    reason: Reason | None = None
    detail: str = ""
    admin_name: str | None = None
    identity: Identity | None = None

    def __str__(self) -> str:
        return "ok" if self.ok else f"{self.reason}: {self.detail}"
