"""`discard --force` saves everything in a snapshot; `restore` gives it back byte for byte. A
crash at any step of discard or restore, then `doctor --fix`: nothing lost, nothing orphaned."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from laneboard.core.adapters.faults import POINTS
from tests.conftest import git, is_ancestor


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every file below `root` except `.git`: kind, mode bits, content (or link target)."""
    found = {}
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in files:
            path = Path(directory) / name
            relative = str(path.relative_to(root))
            if relative == ".git":
                continue
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                found[relative] = ("link", 0, os.readlink(path).encode())
            else:
                found[relative] = ("file", info.st_mode & 0o777, path.read_bytes())
    return found


def _state_of(worktree: Path) -> tuple[object, ...]:
    return (
        _tree(worktree),
        git(worktree, "status", "--porcelain=v2", "--untracked-files=all"),
        git(worktree, "rev-parse", "HEAD"),
        git(worktree, "ls-files", "-s"),
    )


def _messy(worktree: Path) -> None:
    """Every kind of work an agent leaves: commits, staged, unstaged on top of staged, deleted,
    untracked (text, binary, executable, symlink, in a new directory)."""
    (worktree / "feature.py").write_text("def f():\n    return 1\n")
    git(worktree, "add", "feature.py")
    git(worktree, "commit", "-q", "-m", "feature")
    (worktree / "README.md").write_text("staged\n")
    git(worktree, "add", "README.md")
    (worktree / "README.md").write_text("staged\nand unstaged on top\n")
    (worktree / "feature.py").unlink()
    (worktree / "notes").mkdir()
    (worktree / "notes" / "todo.md").write_text("- finish\n")
    (worktree / "blob.bin").write_bytes(bytes(range(256)) * 3)
    (worktree / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (worktree / "run.sh").chmod(0o755)
    (worktree / "link").symlink_to("notes/todo.md")
    (worktree / "new-staged.txt").write_text("added\n")
    git(worktree, "add", "new-staged.txt")


def _show(cli, name: str) -> dict[str, object]:
    return json.loads(cli("show", name, "--json").out)


def test_force_discard_then_restore_gives_back_every_byte(repo: Path, cli) -> None:
    assert cli("new", "t", "--no-start").code == 0
    worktree = repo / ".worktrees" / "t"
    _messy(worktree)
    before = _state_of(worktree)
    tip = git(worktree, "rev-parse", "HEAD")

    refused = cli("discard", "t")
    assert refused.code == 1
    assert "--force saves them in a snapshot first" in refused.err

    result = cli("discard", "t", "--force")
    assert result.code == 0, result.err
    assert not worktree.exists()
    assert not (repo / ".git" / "worktrees" / "t").exists()
    assert git(repo, "branch", "--list", "lb/t/work") == ""
    snapshots = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/snapshots/")
    assert len(snapshots.splitlines()) == 1
    assert is_ancestor(repo, tip, snapshots)
    assert _show(cli, "t")["state"] == "discarded"

    restored = cli("restore", "t")
    assert restored.code == 0, restored.err
    assert _state_of(worktree) == before
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/lb/t/work"
    task = _show(cli, "t")
    assert task["state"] == "provisioned"
    assert cli("verify", "t").code == 0


def test_detached_head_with_new_commits_is_restored_detached(repo: Path, cli) -> None:
    assert cli("new", "d", "--no-start").code == 0
    worktree = repo / ".worktrees" / "d"
    git(worktree, "checkout", "-q", "--detach")
    (worktree / "x.txt").write_text("x\n")
    git(worktree, "add", "x.txt")
    git(worktree, "commit", "-q", "-m", "detached work")
    before = _state_of(worktree)
    assert "commit only here" in cli("discard", "d").err
    assert cli("discard", "d", "--force").code == 0
    assert cli("restore", "d").code == 0
    assert _state_of(worktree) == before
    assert git(worktree, "rev-parse", "lb/d/work") == git(repo, "rev-parse", "main")


def test_clean_discard_needs_no_force_and_still_keeps_a_snapshot(repo: Path, cli) -> None:
    assert cli("new", "c", "--no-start").code == 0
    assert cli("discard", "c").code == 0
    assert git(repo, "for-each-ref", "refs/laneboard/snapshots/") != ""
    assert cli("restore", "c").code == 0
    assert git(repo / ".worktrees" / "c", "status", "--porcelain") == ""


def test_restore_refuses_while_a_live_task_has_the_name(repo: Path, cli) -> None:
    assert cli("new", "n", "--no-start").code == 0
    assert cli("discard", "n").code == 0
    assert cli("new", "n", "--no-start").code == 0
    result = cli("restore", "n")
    assert result.code == 1
    assert "'n' is taken by a live task" in result.err


def test_restore_of_a_task_never_discarded_is_refused(repo: Path, cli) -> None:
    assert cli("init").code == 0
    result = cli("restore", "ghost")
    assert result.code == 1
    assert "no task named 'ghost'" in result.err


def test_retain_keeps_worktree_and_branch(repo: Path, cli) -> None:
    assert cli("new", "r", "--no-start").code == 0
    (repo / ".worktrees" / "r" / "wip.txt").write_text("wip\n")
    result = cli("retain", "r")
    assert result.code == 0
    assert _show(cli, "r")["state"] == "retained"
    assert (repo / ".worktrees" / "r" / "wip.txt").read_text() == "wip\n"
    assert git(repo, "rev-parse", "lb/r/work") == git(repo, "rev-parse", "main")
    again = cli("retain", "r")
    assert again.code == 0
    assert again.out == "r: already retained; nothing to do\n"


def test_discard_of_a_task_whose_worktree_was_removed_still_guards_its_commits(
    repo: Path, cli
) -> None:
    """Was lost: a branch whose worktree was already gone was deleted by a plain discard although
    it held unique commits. One rule, whatever the worktree: refuse without --force."""
    assert cli("new", "h", "--no-start").code == 0
    worktree = repo / ".worktrees" / "h"
    (worktree / "f.txt").write_text("f\n")
    git(worktree, "add", "f.txt")
    git(worktree, "commit", "-q", "-m", "only on lb/h/work")
    tip = git(worktree, "rev-parse", "HEAD")
    git(repo, "worktree", "remove", "--force", str(worktree))
    refused = cli("discard", "h")
    assert refused.code == 1
    assert f"commit only here: {tip[:10]} only on lb/h/work" in refused.err
    assert git(repo, "rev-parse", "lb/h/work") == tip
    assert git(repo, "for-each-ref", "refs/laneboard/") == ""
    assert cli("discard", "h", "--force").code == 0
    snapshot = git(repo, "for-each-ref", "--format=%(objectname)", "refs/laneboard/snapshots/")
    assert is_ancestor(repo, tip, snapshot)
    assert git(repo, "branch", "--list", "lb/h/work") == ""


DISCARD_POINTS = [p for p in POINTS if p.startswith("discard.")]


def _refs(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    return dict(line.split(" ") for line in out.splitlines())


@pytest.mark.parametrize("point", DISCARD_POINTS)
def test_crash_in_discard_then_doctor_fix_loses_nothing(repo: Path, cli, point: str) -> None:
    assert cli("new", "k", "--no-start").code == 0
    worktree = repo / ".worktrees" / "k"
    _messy(worktree)
    before = _state_of(worktree)
    crashed = cli("discard", "k", "--force", env={"LANEBOARD_FAULT": point})
    assert crashed.code == -9
    assert _show(cli, "k")["state"] == "discarding"
    report = json.loads(cli("doctor", "--json").out)["findings"]
    assert [(f["kind"], f["task"]) for f in report] == [("interrupted-discard", "k")]
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["fixed"] for f in fixed] == ["finished"]
    assert _show(cli, "k")["state"] == "discarded"
    assert not worktree.exists()
    assert "refs/heads/lb/k/work" not in _refs(repo)
    assert not (repo / ".git" / "worktrees" / "k").exists()
    assert cli("restore", "k").code == 0
    assert _state_of(worktree) == before
    assert json.loads(cli("doctor", "--json").out)["findings"] == []


RESTORE_POINTS = [
    "provision.after_intent",
    "provision.after_branch",
    "provision.after_worktree_add",
    "provision.after_pin",
    "restore.after_apply",
    "provision.after_copy",
    "provision.after_setup",
]


@pytest.mark.parametrize("point", RESTORE_POINTS)
def test_crash_in_restore_then_doctor_fix_loses_nothing(repo: Path, cli, point: str) -> None:
    assert cli("new", "q", "--no-start").code == 0
    worktree = repo / ".worktrees" / "q"
    _messy(worktree)
    before = _state_of(worktree)
    assert cli("discard", "q", "--force").code == 0
    snapshot_refs = {k: v for k, v in _refs(repo).items() if k.startswith("refs/laneboard/")}
    crashed = cli("restore", "q", env={"LANEBOARD_FAULT": point})
    assert crashed.code == -9
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["kind"] for f in fixed] == ["interrupted-provisioning"]
    # The snapshot is never touched by a restore, whatever happens to it.
    assert {k: v for k, v in _refs(repo).items() if k.startswith("refs/laneboard/")} == (
        snapshot_refs
    )
    if fixed[0]["fixed"] == "finished":
        assert _state_of(worktree) == before
    else:
        assert fixed[0]["fixed"] == "marked failed"
        assert not worktree.exists()
        assert "refs/heads/lb/q/work" not in _refs(repo)
        assert cli("restore", "q").code == 0  # the snapshot is still there to restore from
        assert _state_of(worktree) == before
    assert json.loads(cli("doctor", "--json").out)["findings"] == []
