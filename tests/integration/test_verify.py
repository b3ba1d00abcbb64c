"""`verify_worktree` against real linked worktrees made by the git CLI (DESIGN.md section 5).

Every worktree is created exactly as laneboard creates it (`git worktree add -b lb/<name>
<root>/.worktrees/<name> HEAD`), then altered on disk the way an operator, a script or a mistake
could alter it. Each test asserts the exact reason, so a check that silently stopped running (or
ran in the wrong order) fails here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from laneboard.core.adapters.verify import MAX_GITFILE_BYTES, verify_worktree
from laneboard.core.domain.identity import Identity
from laneboard.core.domain.verdict import Reason, Verdict
from tests.conftest import git, make_repo


def add_worktree(root: Path, name: str, *, at: Path | None = None) -> Path:
    """A linked worktree on branch `lb/<name>`, by default at `<root>/.worktrees/<name>`."""
    path = at if at is not None else root / ".worktrees" / name
    git(root, "worktree", "add", "-q", "-b", f"lb/{name}/work", str(path), "HEAD")
    return path


def verify(
    root: Path, path: Path, *, admin_name: str | None = None, identity: Identity | None = None
) -> Verdict:
    return verify_worktree(
        path,
        area=root / ".worktrees",
        common_dir=root / ".git",
        admin_name=admin_name,
        identity=identity,
    )


def pin(root: Path, path: Path) -> Identity:
    """The identity laneboard records from the first accepted verdict after creation."""
    verdict = verify(root, path)
    assert verdict.ok, str(verdict)
    assert verdict.identity is not None
    return verdict.identity


def assert_rejected(verdict: Verdict, reason: Reason) -> None:
    assert verdict.ok is False and verdict.reason is reason, str(verdict)


def assert_accepted(verdict: Verdict, admin_name: str) -> None:
    assert verdict.ok is True, str(verdict)
    assert verdict.reason is None
    assert verdict.admin_name == admin_name


# --- accepted forms -----------------------------------------------------------------------


def test_accepts_plain_worktree_with_pinned_admin_name_and_identity(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)

    verdict = verify(repo, path, admin_name="x", identity=identity)

    assert_accepted(verdict, "x")
    assert verdict.identity == identity


def test_first_pin_without_admin_name_or_identity_reports_what_it_observed(repo: Path) -> None:
    path = add_worktree(repo, "x")

    verdict = verify(repo, path, admin_name=None, identity=None)

    assert_accepted(verdict, "x")
    dir_info, git_info = path.lstat(), (path / ".git").lstat()
    assert verdict.identity == Identity(
        dir_dev=dir_info.st_dev,
        dir_ino=dir_info.st_ino,
        gitfile_dev=git_info.st_dev,
        gitfile_ino=git_info.st_ino,
    )


def test_accepts_gitfile_with_relative_gitdir(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    (path / ".git").write_bytes(b"gitdir: ../../.git/worktrees/x\n")

    assert_accepted(verify(repo, path, admin_name="x", identity=identity), "x")


def test_accepts_gitfile_with_crlf_ending(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    gitfile = path / ".git"
    gitfile.write_bytes(gitfile.read_bytes().rstrip(b"\n") + b"\r\n")

    assert_accepted(verify(repo, path, admin_name="x", identity=identity), "x")


def test_accepts_gitfile_without_final_newline(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    gitfile = path / ".git"
    gitfile.write_bytes(gitfile.read_bytes().rstrip(b"\r\n"))
    assert not gitfile.read_bytes().endswith(b"\n")

    assert_accepted(verify(repo, path, admin_name="x", identity=identity), "x")


def test_accepts_backlink_relative_to_admin_dir(repo: Path) -> None:
    """git 2.48's `worktree.useRelativePaths` writes `<admin>/gitdir` relative to the admin dir;
    verification resolves it from there, so it still leads back to this `.git` file."""
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    (repo / ".git" / "worktrees" / "x" / "gitdir").write_bytes(b"../../../.worktrees/x/.git\n")

    assert_accepted(verify(repo, path, admin_name="x", identity=identity), "x")


def test_accepts_both_links_relative_as_git_2_48_writes_them(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    (path / ".git").write_bytes(b"gitdir: ../../.git/worktrees/x\n")
    (repo / ".git" / "worktrees" / "x" / "gitdir").write_bytes(b"../../../.worktrees/x/.git\n")

    assert_accepted(verify(repo, path, admin_name="x", identity=identity), "x")


# --- rejections: where the worktree is ----------------------------------------------------


def test_rejects_missing_worktree_dir(repo: Path) -> None:
    add_worktree(repo, "x")

    assert_rejected(verify(repo, repo / ".worktrees" / "gone"), Reason.MISSING)


def test_rejects_worktree_dir_that_is_a_symlink_to_a_worktree_elsewhere(
    repo: Path, tmp_path: Path
) -> None:
    real = add_worktree(repo, "x", at=tmp_path / "elsewhere" / "x")
    link = repo / ".worktrees" / "x"
    link.parent.mkdir()
    link.symlink_to(real, target_is_directory=True)

    assert_rejected(verify(repo, link), Reason.SYMLINKED)


def test_rejects_symlinked_component_below_the_area(repo: Path, tmp_path: Path) -> None:
    add_worktree(repo, "x", at=tmp_path / "elsewhere" / "x")
    sub = repo / ".worktrees" / "sub"
    sub.parent.mkdir()
    sub.symlink_to(tmp_path / "elsewhere", target_is_directory=True)

    assert_rejected(verify(repo, sub / "x"), Reason.SYMLINKED)


def test_rejects_worktree_outside_the_area(repo: Path, tmp_path: Path) -> None:
    path = add_worktree(repo, "x", at=tmp_path / "outside" / "x")

    assert_rejected(verify(repo, path), Reason.OUTSIDE_AREA)


def test_rejects_path_escaping_the_area_through_dot_dot(repo: Path, tmp_path: Path) -> None:
    add_worktree(repo, "x", at=tmp_path / "outside" / "x")
    (repo / ".worktrees").mkdir()
    sneaky = repo / ".worktrees" / ".." / ".." / "outside" / "x"

    assert_rejected(verify(repo, sneaky), Reason.OUTSIDE_AREA)


# --- rejections: the `.git` file ----------------------------------------------------------


def test_rejects_gitfile_that_is_a_symlink_to_a_valid_gitfile(repo: Path, tmp_path: Path) -> None:
    path = add_worktree(repo, "x")
    moved = tmp_path / "gitfile-elsewhere"
    (path / ".git").rename(moved)
    (path / ".git").symlink_to(moved)
    # git itself follows the link, so the worktree still works for git.
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == "lb/x/work"

    assert_rejected(verify(repo, path), Reason.SYMLINKED)


@pytest.mark.parametrize("planted_by", ["clone", "init"])
def test_rejects_repository_planted_in_the_area(repo: Path, planted_by: str) -> None:
    planted = repo / ".worktrees" / "planted"
    planted.parent.mkdir()
    if planted_by == "clone":
        git(repo, "clone", "-q", str(repo), str(planted))
    else:
        make_repo(planted)
    assert (planted / ".git").is_dir()

    assert_rejected(verify(repo, planted), Reason.GITFILE_NOT_REGULAR)


def test_rejects_gitfile_larger_than_one_mib(repo: Path) -> None:
    path = add_worktree(repo, "x")
    gitfile = path / ".git"
    # A valid line padded with newlines: only the size check can catch it.
    gitfile.write_bytes(gitfile.read_bytes() + b"\n" * MAX_GITFILE_BYTES)

    assert_rejected(verify(repo, path), Reason.GITFILE_TOO_LARGE)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"gitdir:{admin}\n", id="no-space"),
        pytest.param(b"", id="empty"),
        pytest.param(b"gitdir: \n", id="empty-path"),
        pytest.param(b"\x00\xffnot a gitfile at all\n", id="garbage"),
        pytest.param(b"GITDIR: {admin}\n", id="wrong-case"),
    ],
)
def test_rejects_malformed_gitfile(repo: Path, content: bytes) -> None:
    path = add_worktree(repo, "x")
    admin = os.fsencode(repo / ".git" / "worktrees" / "x")
    (path / ".git").write_bytes(content.replace(b"{admin}", admin))

    assert_rejected(verify(repo, path), Reason.GITFILE_MALFORMED)


# --- rejections: the admin dir ------------------------------------------------------------


def test_rejects_worktree_of_another_repository_moved_into_the_area(
    repo: Path, tmp_path: Path
) -> None:
    other = make_repo(tmp_path / "other")
    foreign = add_worktree(other, "x", at=tmp_path / "other-worktrees" / "x")
    (repo / ".worktrees").mkdir()
    moved = repo / ".worktrees" / "x"
    foreign.rename(moved)

    assert_rejected(verify(repo, moved), Reason.GITDIR_MISMATCH)


def test_rejects_admin_name_other_than_the_recorded_one(repo: Path) -> None:
    add_worktree(repo, "x")
    path_y = add_worktree(repo, "y")

    # The ledger recorded admin name "x" for this lane, but the dir there belongs to "y".
    assert_rejected(verify(repo, path_y, admin_name="x"), Reason.GITDIR_MISMATCH)


def test_rejects_commondir_altered_to_another_repository(repo: Path, tmp_path: Path) -> None:
    path = add_worktree(repo, "x")
    other = make_repo(tmp_path / "other")
    (repo / ".git" / "worktrees" / "x" / "commondir").write_bytes(
        os.fsencode(other / ".git") + b"\n"
    )

    assert_rejected(verify(repo, path), Reason.COMMONDIR_MISMATCH)


def test_rejects_backlink_pointing_elsewhere(repo: Path, tmp_path: Path) -> None:
    path = add_worktree(repo, "x")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".git").write_bytes((path / ".git").read_bytes())
    (repo / ".git" / "worktrees" / "x" / "gitdir").write_bytes(
        os.fsencode(elsewhere / ".git") + b"\n"
    )

    assert_rejected(verify(repo, path), Reason.BACKLINK_MISMATCH)


def test_rejects_admin_dir_that_is_a_symlink(repo: Path, tmp_path: Path) -> None:
    """Regression: the symlinked admin dir resolved out of `.git/worktrees/` and was reported
    as `gitdir-mismatch`; the symlink check now runs before the realpath comparison."""
    path = add_worktree(repo, "x")
    admin = repo / ".git" / "worktrees" / "x"
    moved = tmp_path / "admin-elsewhere" / "x"
    moved.parent.mkdir()
    admin.rename(moved)
    admin.symlink_to(moved, target_is_directory=True)

    assert_rejected(verify(repo, path, admin_name="x"), Reason.SYMLINKED)


def test_rejects_gitdir_reached_through_a_symlink_to_the_admin_dir(
    repo: Path, tmp_path: Path
) -> None:
    path = add_worktree(repo, "x")
    link = tmp_path / "admin-link"
    link.symlink_to(repo / ".git" / "worktrees" / "x", target_is_directory=True)
    (path / ".git").write_bytes(b"gitdir: " + os.fsencode(link) + b"\n")

    assert_rejected(verify(repo, path, admin_name="x"), Reason.SYMLINKED)


# --- rejections: moved, copied or replaced worktrees --------------------------------------


def test_rejects_worktree_moved_to_another_name_in_the_area(repo: Path) -> None:
    old = add_worktree(repo, "x")
    identity = pin(repo, old)
    new = repo / ".worktrees" / "renamed"
    subprocess.run(["mv", str(old), str(new)], check=True)

    assert_rejected(verify(repo, old, admin_name="x", identity=identity), Reason.MISSING)
    # The moved dir keeps its gitfile, but git's backlink still names the old path.
    assert_rejected(verify(repo, new, admin_name="x", identity=identity), Reason.BACKLINK_MISMATCH)


def test_rejects_copy_put_in_place_of_the_moved_original(repo: Path, tmp_path: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    moved = tmp_path / "moved-away"
    path.rename(moved)
    subprocess.run(["cp", "-a", str(moved), str(path)], check=True)
    # Everything but the identity matches: the copy is indistinguishable by content.
    assert verify(repo, path, admin_name="x").ok

    assert_rejected(verify(repo, path, admin_name="x", identity=identity), Reason.IDENTITY_CHANGED)


def test_rejects_worktree_recreated_at_the_same_path(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    # Hold the old dir and `.git` open so their inodes stay allocated: otherwise ext4 may hand
    # the same inode numbers to the new ones, and the scenario would not be what it claims.
    held_dir = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    held_gitfile = os.open(path / ".git", os.O_RDONLY)
    try:
        git(repo, "worktree", "remove", str(path))
        git(repo, "branch", "-q", "-D", "lb/x/work")
        assert not path.exists()
        add_worktree(repo, "x")
        # Same path, same admin name, same branch: only the identity tells them apart.
        assert verify(repo, path, admin_name="x").ok

        verdict = verify(repo, path, admin_name="x", identity=identity)
    finally:
        os.close(held_dir)
        os.close(held_gitfile)

    assert_rejected(verdict, Reason.IDENTITY_CHANGED)


def test_rejects_gitfile_replaced_by_an_identical_copy(repo: Path) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    gitfile = path / ".git"
    replacement = path / ".git.new"
    replacement.write_bytes(gitfile.read_bytes())
    replacement.replace(gitfile)
    assert path.lstat().st_ino == identity.dir_ino

    assert_rejected(verify(repo, path, admin_name="x", identity=identity), Reason.IDENTITY_CHANGED)


def test_rejects_original_gitfile_moved_into_a_new_dir_at_the_same_path(
    repo: Path, tmp_path: Path
) -> None:
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    fresh = repo / ".worktrees" / "fresh"
    fresh.mkdir()
    (path / ".git").rename(fresh / ".git")
    path.rename(tmp_path / "old-dir")  # kept, so its inode number cannot be reused
    fresh.rename(path)
    assert (path / ".git").lstat().st_ino == identity.gitfile_ino

    assert_rejected(verify(repo, path, admin_name="x", identity=identity), Reason.IDENTITY_CHANGED)


@pytest.mark.parametrize("where", [".git", "commondir", "gitdir"])
def test_rejects_nul_byte_instead_of_crashing(repo: Path, where: str) -> None:
    """Regression: a NUL byte in `.git` or the admin files raised ValueError (embedded null
    byte) and took down verify, doctor and exec with an internal error."""
    path = add_worktree(repo, "x")
    identity = pin(repo, path)
    target = path / ".git" if where == ".git" else repo / ".git" / "worktrees" / "x" / where
    target.write_bytes(target.read_bytes().rstrip(b"\n") + b"\0tail\n")
    verdict = verify(repo, path, admin_name="x", identity=identity)
    expected = {
        ".git": Reason.GITFILE_MALFORMED,
        "commondir": Reason.COMMONDIR_MISMATCH,
        "gitdir": Reason.BACKLINK_MISMATCH,
    }[where]
    assert verdict.ok is False and verdict.reason is expected
