"""A worktree removed and re-created at a task's path (`rm -rf`, `git worktree prune`,
`git worktree add`) can get the same device and inodes back (ext4 hands freed inodes out
again): its pinned identity includes a random token laneboard wrote into the admin dir at
creation, which no re-creation carries (issue 27, item 7)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import git


def test_a_worktree_re_created_at_a_tasks_path_never_verifies(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "v", "--no-start").code == 0
    assert cli("verify", "v").code == 0
    worktree = repo / ".worktrees" / "v"
    same_inodes = 0
    pinned = worktree.stat().st_ino, (worktree / ".git").stat().st_ino
    for attempt in range(30):
        shutil.rmtree(worktree)
        git(repo, "worktree", "prune")
        git(repo, "worktree", "add", "-q", "-B", f"other{attempt}", str(worktree))
        same_inodes += (worktree.stat().st_ino, (worktree / ".git").stat().st_ino) == pinned
        checked = cli("verify", "v")
        assert checked.code != 0, f"attempt {attempt}: a re-created worktree verified"
        assert "not the directory laneboard created" in checked.err, checked.err
    # What makes this test worth its loop: at least one re-creation got the inodes back.
    print(f"{same_inodes} of 30 re-creations had the pinned inodes")


def test_a_worktree_keeps_verifying_and_its_token_cannot_be_rewritten_inside(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t", "--no-start").code == 0
    token = repo / ".git" / "worktrees" / "t" / "laneboard-token"
    assert len(token.read_text().strip()) == 32
    done = cli("exec", "--lane", "t", "--", "sh", "-c", f"echo forged > {token}")
    assert done.code != 0
    assert cli("verify", "t").code == 0
