"""Discard against everything that can happen while it runs: another laneboard command, a
writer that knows the worktree's path, git failing half-way, a worktree deleted by hand, a
process table that cannot be read. Each test holds the discard at an exact step
(`LANEBOARD_PAUSE`) or builds the state a crash leaves, then checks that no byte was lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from laneboard.core.adapters import procs
from tests.conftest import git, is_ancestor
from tests.procs import started

NAME = "t"


def _show(cli, name: str = NAME) -> dict[str, object]:
    return json.loads(cli("show", name, "--json").out)


def _kinds(cli, name: str = NAME) -> list[str]:
    return [e["kind"] for e in json.loads(cli("log", name, "--json").out)["events"]]


def _snapshot_files(repo: Path, ref: str) -> dict[str, bytes]:
    names = git(repo, "ls-tree", "-r", "-z", "--name-only", ref).split("\0")
    return {
        name: subprocess.run(
            ["git", "cat-file", "blob", f"{ref}:{name}"], cwd=repo, capture_output=True, check=True
        ).stdout
        for name in names
        if name
    }


def _snapshots(repo: Path) -> list[str]:
    out = git(repo, "for-each-ref", "--sort=refname", "--format=%(refname)", "refs/laneboard/")
    return out.splitlines()


@pytest.fixture
def worktree(repo: Path, cli) -> Path:
    assert cli("new", NAME, "--no-start").code == 0
    return Path(str(_show(cli)["worktree_path"]))


def _discard(repo: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return started(["discard", NAME, *args], repo, env)


def test_retain_during_a_discard_is_refused_and_the_discard_finishes(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """Was lost: `retain` was accepted while a discard ran (any caller could move `discarding`
    on); the discard then failed half-way, worktree and branch gone, and `restore` refused
    because the task was "live". Now only the owner moves a task that is `discarding`."""
    (worktree / "wip.txt").write_text("work in progress\n")
    held = pause("discard.after_quarantine")
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    assert _show(cli)["state"] == "discarding"
    retained = cli("retain", NAME)
    assert retained.code == 1
    assert f"is discarding by process {running.pid}" in retained.err
    assert cli("discard", NAME, "--force").code == 1  # nor may a second discard take over
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 0, err
    assert _show(cli)["state"] == "discarded"
    assert cli("restore", NAME).code == 0
    assert (worktree / "wip.txt").read_text() == "work in progress\n"


def test_a_writer_that_uses_the_old_path_fails_instead_of_losing_its_file(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """Was lost: a process writing into the worktree without having its cwd or a file open
    there (an editor's save, a watcher) lost files written after the last snapshot pass. Now the
    worktree is moved to a quarantine name first: writes by the old path fail."""
    held = pause("discard.after_quarantine")
    running = _discard(repo, env=held.env)
    held.reached()
    assert not worktree.exists()
    with pytest.raises(FileNotFoundError):
        (worktree / "late.txt").write_text("written by path during the discard\n")
    held.go()
    assert running.wait(timeout=30) == 0


def test_a_file_written_into_the_quarantine_before_removal_is_saved_or_kept(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """Even a writer that finds the quarantine loses nothing: with nothing lifted, git removes
    without --force and refuses, the discard looks again, and without --force the new file
    stops it (the worktree goes back, the task is retained)."""
    held = pause("discard.before_remove")
    running = _discard(repo, env=held.env)
    held.reached()
    quarantine = next(Path(repo, ".worktrees").glob(".discarding-*"))
    (quarantine / "late.txt").write_text("written just before removal\n")
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 1
    assert "untracked file: late.txt" in err
    assert (worktree / "late.txt").read_text() == "written just before removal\n"
    assert _show(cli)["state"] == "retained"
    assert cli("verify", NAME).code == 0
    assert not list(Path(repo, ".worktrees").glob(".discarding-*"))


def test_with_force_a_file_written_just_before_removal_gets_a_fresh_snapshot(
    repo: Path, cli, worktree: Path, pause
) -> None:
    (worktree / "first.txt").write_text("lifted by --force\n")
    held = pause("discard.after_snapshot")
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    quarantine = next(Path(repo, ".worktrees").glob(".discarding-*"))
    (quarantine / "late.txt").write_text("written after the first snapshot\n")
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 0, err
    newest = _snapshots(repo)[-1]
    saved = _snapshot_files(repo, newest)
    assert saved["late.txt"] == b"written after the first snapshot\n"
    assert saved["first.txt"] == b"lifted by --force\n"
    assert cli("restore", NAME).code == 0
    assert (worktree / "late.txt").exists()


def test_doctor_finishes_a_removal_git_left_half_done_and_saves_what_was_left(
    repo: Path, cli, worktree: Path
) -> None:
    """Was lost: when `git worktree remove` failed with "Directory not empty" (a file appeared
    during removal), admin dir and `.git` were gone, the files orphaned, and the task could
    never be discarded again. Now `doctor --fix` recognises the quarantine by its pinned inode,
    saves every file left in it in a snapshot, then removes exactly those."""
    (worktree / "kept.txt").write_text("committed work\n")
    git(worktree, "add", "kept.txt")
    git(worktree, "commit", "-q", "-m", "work")
    crashed = cli("discard", NAME, "--force", env={"LANEBOARD_FAULT": "discard.before_remove"})
    assert crashed.code == -9
    quarantine = next(Path(repo, ".worktrees").glob(".discarding-*"))
    # What git leaves when its removal fails half-way: `.git` and the admin dir gone, files left.
    (quarantine / ".git").unlink()
    shutil.rmtree(repo / ".git" / "worktrees" / NAME)
    (quarantine / "appeared.txt").write_text("written while git removed the tree\n")
    (quarantine / "kept.txt").unlink()

    report = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [(f["kind"], f["fixed"]) for f in report] == [("interrupted-discard", "finished")]
    assert not quarantine.exists()
    assert _show(cli)["state"] == "discarded"
    leftovers = _snapshot_files(repo, _snapshots(repo)[-1])
    assert leftovers == {
        "README.md": b"hello\n",
        "appeared.txt": b"written while git removed the tree\n",
    }
    assert json.loads(cli("doctor", "--json").out)["findings"] == []


@pytest.mark.parametrize("how", ["rm -rf", "git worktree remove", "git worktree prune"])
def test_a_worktree_deleted_by_hand_can_be_discarded(
    repo: Path, cli, worktree: Path, how: str
) -> None:
    """Was stuck: after `rm -rf .worktrees/t`, `discard`, `discard --force` and `doctor --fix`
    all refused and nothing said what to do. Now discard saves what the branch and the admin dir
    still hold and removes exactly that task's registration (never another's)."""
    (worktree / "c.txt").write_text("committed\n")
    git(worktree, "add", "c.txt")
    git(worktree, "commit", "-q", "-m", "commit on the branch")
    tip = git(worktree, "rev-parse", "HEAD")
    git(repo, "branch", "-f", "elsewhere", tip)  # reachable elsewhere: no unique commit
    assert cli("new", "bystander", "--no-start").code == 0
    shutil.rmtree(repo / ".worktrees" / "bystander")  # a foreign prunable entry: never touched
    if how == "rm -rf":
        shutil.rmtree(worktree)
    elif how == "git worktree remove":
        git(repo, "worktree", "remove", str(worktree))
    else:
        shutil.rmtree(worktree)
        git(repo, "worktree", "prune", "--expire=now")
        assert cli("new", "bystander2", "--no-start").code == 0  # registrations are fine again
        shutil.rmtree(repo / ".worktrees" / "bystander2")
    doctor = json.loads(cli("doctor", "--json").out)["findings"]
    missing = [f for f in doctor if f["kind"] == "missing-worktree" and f["task"] == NAME]
    assert missing and "laneboard discard t" in missing[0]["detail"]

    result = cli("discard", NAME)
    assert result.code == 0, result.err
    assert _show(cli)["state"] == "discarded"
    assert git(repo, "branch", "--list", "lb/t/work") == ""
    assert f"{repo / '.worktrees' / NAME}" not in git(repo, "worktree", "list", "--porcelain")
    listing = git(repo, "worktree", "list", "--porcelain")
    assert "bystander" in listing or how == "git worktree prune"
    assert is_ancestor(repo, tip, _snapshots(repo)[-1])


def test_a_missing_locked_worktree_is_not_unregistered(repo: Path, cli, worktree: Path) -> None:
    """A locked worktree may be missing only for now (on removable media, which is what locks
    are for): discard refuses, with or without --force."""
    git(repo, "worktree", "lock", "--reason", "on the usb disk", str(worktree))
    shutil.rmtree(worktree)
    for args in ((), ("--force",)):
        result = cli("discard", NAME, *args)
        assert result.code == 1
        assert "locked: on the usb disk" in result.err
    assert "\nlocked on the usb disk" in git(repo, "worktree", "list", "--porcelain")
    assert _show(cli)["state"] == "provisioned"


def test_a_symlinked_worktree_area_is_refused(repo: Path, cli, tmp_path: Path) -> None:
    """Was lost: with `.worktrees` a symlink to a directory outside the repo, `new`, `verify`
    and `discard` all succeeded, and discard deleted a worktree living outside the repository."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / ".worktrees").symlink_to(elsewhere)
    result = cli("new", "x", "--no-start")
    assert result.code == 1
    assert "is a symbolic link" in result.err
    assert list(elsewhere.iterdir()) == []


def test_an_area_replaced_by_a_symlink_later_is_refused_by_verify_and_discard(
    repo: Path, cli, worktree: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "moved-area"
    os.rename(repo / ".worktrees", moved)
    (repo / ".worktrees").symlink_to(moved)
    verdict = cli("verify", NAME)
    assert verdict.code == 1
    assert "symlinked" in verdict.err
    for args in ((), ("--force",)):
        refused = cli("discard", NAME, *args)
        assert refused.code == 1, refused.err
    assert (moved / NAME / "README.md").exists()


def test_without_a_readable_process_table_discard_refuses(
    repo: Path, cli, worktree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was silent: without /proc the "process inside" blocker passed. It fails closed now: a
    hard blocker that says processes cannot be seen."""
    empty = tmp_path / "no-proc"
    empty.mkdir()
    monkeypatch.setattr(procs, "PROC", str(empty))
    for args in ((), ("--force",)):
        refused = cli("discard", NAME, *args)
        assert refused.code == 1
        assert f"processes unseen: the process table {empty} cannot be read" in refused.err
    assert worktree.exists()


def test_the_journal_says_intent_then_removing_then_removed_with_path_branch_and_tip(
    repo: Path, cli, worktree: Path
) -> None:
    tip = git(worktree, "rev-parse", "HEAD")
    assert cli("discard", NAME).code == 0
    events = json.loads(cli("log", NAME, "--json").out)["events"]
    kinds = [e["kind"] for e in events]
    order = [
        "discard.intent",
        "worktree.quarantined",
        "snapshot.created",
        "worktree.removing",
        "worktree.removed",
        "branch.deleted",
        "task.discarded",
    ]
    assert [k for k in kinds if k in order] == order
    by_kind = {e["kind"]: e["data"] for e in events}
    assert by_kind["discard.intent"]["path"] == str(worktree)
    assert by_kind["discard.intent"]["branch"] == "lb/t/work"
    assert by_kind["discard.intent"]["tip"] == tip
    assert by_kind["worktree.removing"]["tip"] == tip
    assert by_kind["worktree.removing"]["original"] == str(worktree)
    assert by_kind["worktree.removed"]["path"] == str(worktree)
    assert by_kind["worktree.removed"]["branch"] == "lb/t/work"
    assert by_kind["branch.deleted"]["tip"] == tip


@pytest.mark.parametrize("point", ["discard.before_remove", "discard.after_verify"])
@pytest.mark.parametrize("swap", ["directory", "symlink"])
def test_with_force_a_directory_swapped_in_at_the_last_moment_is_never_deleted(
    repo: Path, cli, worktree: Path, pause, tmp_path: Path, swap: str, point: str
) -> None:
    """Was lost: the quarantine replaced between the last verification and `git worktree remove
    --force` (by another directory, or a link to one holding a copied `.git`) had its files
    deleted, in no snapshot. Now the removal renames whatever is there to a name of its own,
    opens it without following a link and removes it only if it is the pinned directory."""
    (worktree / "wip.txt").write_text("lifted by --force\n")
    held = pause(point)  # before its last verification, and after it
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    quarantine = next(Path(repo, ".worktrees").glob(".discarding-*"))
    aside = tmp_path / "aside"
    os.rename(quarantine, aside)  # the real one, out of the way
    planted = tmp_path / "precious" if swap == "symlink" else quarantine
    planted.mkdir()
    shutil.copy(aside / ".git", planted / ".git")
    (planted / "precious.txt").write_text("nobody saved this\n")
    if swap == "symlink":
        quarantine.symlink_to(planted)
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 1, err
    assert "changed during discard" in err or "replaced during discard" in err, err
    assert (planted / "precious.txt").read_text() == "nobody saved this\n"
    assert (aside / "wip.txt").read_text() == "lifted by --force\n"


def test_with_force_a_file_written_as_the_removal_begins_is_saved(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """A file that lands in the worktree after the last check but before it is renamed away
    is seen in its new place: it is put back and saved in a fresh snapshot before removal."""
    (worktree / "first.txt").write_text("lifted by --force\n")
    held = pause("discard.before_remove")
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    quarantine = next(Path(repo, ".worktrees").glob(".discarding-*"))
    (quarantine / "late.txt").write_text("written as the removal began\n")
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 0, err
    saved = _snapshot_files(repo, _snapshots(repo)[-1])
    assert saved["late.txt"] == b"written as the removal began\n"
    assert not list(Path(repo, ".worktrees").iterdir())
