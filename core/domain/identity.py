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
    admin_token: str | None = None
    """The random token laneboard wrote into the admin dir (`TOKEN_FILE`) when it created the
    worktree. Inodes are handed out again: a worktree removed and re-created at the same path
    (`git worktree prune; git worktree add`) can get the same device and inodes back, never
    this token. None for a worktree pinned before tokens existed (then inodes alone decide)."""

    def as_dict(self) -> dict[str, int | str | None]:
        plain: dict[str, int | str | None] = asdict(self)
        return plain

    def matches(self, observed: Identity) -> bool:
        """`observed` (what verification read) is this pinned identity: the same inodes, and
        the same token where one was pinned."""
        same_inodes = (self.dir_dev, self.dir_ino, self.gitfile_dev, self.gitfile_ino) == (
            observed.dir_dev,
            observed.dir_ino,
            observed.gitfile_dev,
            observed.gitfile_ino,
        )
        return same_inodes and (
            self.admin_token is None or self.admin_token == observed.admin_token
        )

    FIELDS = ("dir_dev", "dir_ino", "gitfile_dev", "gitfile_ino", "admin_token")


TOKEN_FILE = "laneboard-token"
"""The token's file in a worktree's admin dir (git ignores files it does not know there)."""
