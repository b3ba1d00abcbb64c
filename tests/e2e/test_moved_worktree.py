"""A worktree moved by hand (`mv .worktrees/a .worktrees/b`) keeps using the task's admin dir:
its index, HEAD and branch. No discard may remove what that checkout still uses; `doctor`
finds where it went and, with `--fix`, registers it there (issue 27, item 1)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import git


def _staged_then_moved(repo: Path, cli, to: Path) -> Path:  # type: ignore[no-untyped-def]
    assert cli("new", "a", "--no-start").code == 0
    worktree = repo / ".worktrees" / "a"
    (worktree / "staged.txt").write_text("staged\n")
    git(worktree, "add", "staged.txt")
    os.rename(worktree, to)
    return to


def _still_a_checkout(place: Path) -> None:
    assert git(place, "status", "--porcelain") == "A  staged.txt"


@pytest.mark.parametrize("where", ["area", "root"])
@pytest.mark.parametrize("force", [False, True])
def test_a_moved_worktree_is_never_broken_by_a_discard(
    repo: Path, cli, where: str, force: bool
) -> None:  # type: ignore[no-untyped-def]
    to = repo / ".worktrees" / "b" if where == "area" else repo / "elsewhere"
    place = _staged_then_moved(repo, cli, to)
    refused = cli("discard", "a", *(["--force"] if force else []))
    assert refused.code == 1, refused.out
    assert f"moved to {place}" in refused.err, refused.err
    _still_a_checkout(place)
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/lb/a/work")


def test_a_copy_whose_git_file_leads_into_the_admin_dir_is_found_too(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Not the pinned directory (a copy, then the original deleted): its `.git` file still
    leads into the task's admin dir."""
    assert cli("new", "a", "--no-start").code == 0
    worktree = repo / ".worktrees" / "a"
    shutil.copytree(worktree, repo / ".worktrees" / "copy", symlinks=True)
    shutil.rmtree(worktree)
    refused = cli("discard", "a", "--force")
    assert refused.code == 1 and "moved to" in refused.err, refused.err
    assert git(repo / ".worktrees" / "copy", "status", "--porcelain") == ""


def test_doctor_registers_a_moved_worktree_where_it_is_now(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    place = _staged_then_moved(repo, cli, repo / ".worktrees" / "b")
    report = json.loads(cli("doctor", "--json").out)["findings"]
    kinds = {f["kind"] for f in report}
    assert "moved-worktree" in kinds and "unregistered-dir" not in kinds, report
    said = json.dumps(next(f for f in report if f["kind"] == "moved-worktree"))
    assert "--fix registers it there" in said and "ends the task" not in said, said
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    moved = next(f for f in fixed if f["kind"] == "moved-worktree")
    assert moved["fixed"] == f"registered at {place}", fixed
    assert cli("verify", "a").code == 0
    shown = json.loads(cli("show", "a", "--json").out)
    assert shown["worktree_path"] == str(place)
    _still_a_checkout(place)
    assert json.loads(cli("doctor", "--json").out)["findings"] == []
    # Now a discard meets the staged change like any other, and --force saves it.
    assert cli("discard", "a").code == 1
    assert cli("discard", "a", "--force").code == 0
    assert not place.exists()


def test_doctor_leaves_a_checkout_moved_out_of_the_area_where_it_is(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    place = _staged_then_moved(repo, cli, repo / "elsewhere")
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    moved = next(f for f in fixed if f["kind"] == "moved-worktree")
    assert "outside the worktree area" in moved["fixed"], fixed
    _still_a_checkout(place)
