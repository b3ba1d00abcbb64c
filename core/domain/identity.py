"""The pinned identity of a worktree: a plain value, importable without pydantic so that the
lean `laneboard exec` path can verify a lane cheaply."""

from __future__ import annotations

from laneboard.core.domain.values import asdict, value


@value
class Identity:
    """Device and inode of a worktree dir and its `.git` file, pinned right after creation.

    A moved, copied or replaced worktree has another identity, so verification rejects it.
    """

    dir_dev: int
    dir_ino: int
    gitfile_dev: int
    gitfile_ino: int

    def as_dict(self) -> dict[str, int]:
        plain: dict[str, int] = asdict(self)
        return plain

    FIELDS = ("dir_dev", "dir_ino", "gitfile_dev", "gitfile_ino")
