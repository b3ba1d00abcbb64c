"""One scenario per safety check that only an adversary at the exact moment can exercise: each
test fails when its check is deleted (every one was tried: delete the check, see the test
fail). The moments are held with `LANEBOARD_PAUSE`; nothing sleeps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git
from tests.procs import Spawned, exec_agent, started

NAME = "t"


@pytest.fixture
def worktree(repo: Path, cli) -> Path:
    assert cli("new", NAME, "--no-start").code == 0
    return repo / ".worktrees" / NAME


def _discard(repo: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return started(["discard", NAME, *args], repo, env)


def _quarantine(repo: Path) -> Path:
    (found,) = Path(repo, ".worktrees").glob(".discarding-*")
    return found


def _snapshot_file(repo: Path, name: str) -> bytes:
    ref = git(repo, "for-each-ref", "--sort=-refname", "--format=%(refname)", "refs/laneboard/")
    newest = ref.splitlines()[0]
    return subprocess.run(
        ["git", "cat-file", "blob", f"{newest}:{name}"], cwd=repo, capture_output=True, check=True
    ).stdout


def test_reverification_right_before_removal_spares_a_swapped_tree(
    repo: Path, cli, worktree: Path, pause, tmp_path: Path
) -> None:
    """Check: the pinned identity is verified again right before `git worktree remove`. A
    directory swapped in at the quarantine path (same files, same `.git` content: git would
    remove it) is refused and left alone."""
    held = pause("discard.before_remove")
    running = _discard(repo, env=held.env)
    held.reached()
    quarantine = _quarantine(repo)
    os.rename(quarantine, tmp_path / "the-real-one")
    shutil.copytree(tmp_path / "the-real-one", quarantine, symlinks=True)
    (quarantine / "planted.txt").write_text("not the task's; must survive\n")
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 1
    assert "worktree changed during discard" in err
    assert (quarantine / "planted.txt").read_text() == "not the task's; must survive\n"


def test_a_branch_that_moves_just_before_deletion_is_kept(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """Check: the branch is deleted by compare-and-swap on the tip it was judged at."""
    held = pause("discard.before_branch_delete")
    running = _discard(repo, env=held.env)
    held.reached()
    moved = git(repo, "commit-tree", "-p", "lb/t/work", "-m", "pushed just now", "HEAD^{tree}")
    git(repo, "update-ref", "refs/heads/lb/t/work", moved)
    held.go()
    assert running.wait(timeout=30) == 0
    assert git(repo, "rev-parse", "lb/t/work") == moved
    kept = [
        e
        for e in json.loads(cli("log", NAME, "--json").out)["events"]
        if e["kind"] == "branch.kept"
    ]
    assert kept and kept[0]["data"]["reasons"] == ["the branch moved during deletion"]


def test_a_branch_whose_snapshot_vanished_is_kept(repo: Path, cli, worktree: Path, pause) -> None:
    """Check: the branch is deleted only if its commits are reachable elsewhere, judged at the
    moment of deletion (here the snapshot that kept them was deleted meanwhile)."""
    git(worktree, "commit", "-q", "--allow-empty", "-m", "only on lb/t/work")
    tip = git(worktree, "rev-parse", "HEAD")
    held = pause("discard.after_worktree_remove")
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    for ref in git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/").splitlines():
        git(repo, "update-ref", "-d", ref)
    held.go()
    assert running.wait(timeout=30) == 0
    assert git(repo, "rev-parse", "lb/t/work") == tip


def test_an_exec_admitted_after_its_worktree_was_swapped_runs_nothing(
    repo: Path, cli, worktree: Path, tmp_path: Path
) -> None:
    """Check: `exec` verifies the worktree again right after admission (it may have changed
    while the command waited for its lane)."""
    holder = exec_agent(NAME, repo)
    holder.expect(r"^ready ")  # holds the lane before the second command asks for it
    marker = tmp_path / "ran"
    waiting = Spawned(["exec", "--lane", NAME, "--", "touch", str(marker)], repo)
    try:
        waiting.expect(r"waiting for its lane", "err")
        os.rename(worktree, tmp_path / "moved-away")
        shutil.copytree(tmp_path / "moved-away", worktree, symlinks=True)
        holder.send("exit 0")
        assert holder.wait() == 0
        assert waiting.wait() == 1
        waiting.expect(r"lane t rejected: identity-changed", "err")
        assert not marker.exists()
    finally:
        holder.close()
        waiting.close()


def test_an_ignored_file_made_after_the_snapshot_stops_the_discard(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """Check: after the snapshot, `git status` (ignored files included) must still match what
    was judged. A secret that appeared meanwhile (ignored, so in no snapshot) is kept."""
    (worktree / "notes.md").write_text("untracked: --force is needed\n")
    (worktree / ".gitignore").write_text("*.key\n")
    held = pause("discard.after_snapshot")
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    (_quarantine(repo) / "deploy.key").write_text("a secret no snapshot holds\n")
    held.go()
    _, err = running.communicate(timeout=30)
    assert running.returncode == 1
    assert "ignored file: deploy.key" in err
    assert (worktree / "deploy.key").read_text() == "a secret no snapshot holds\n"


def test_a_file_rewritten_after_the_snapshot_is_saved_as_it_is_now(
    repo: Path, cli, worktree: Path, pause
) -> None:
    """Check: every file read for the snapshot must still have the inode, size and times it
    had (the same untracked name with new content shows nothing new in `git status`)."""
    (worktree / "notes.md").write_text("first draft\n")
    held = pause("discard.after_snapshot")
    running = _discard(repo, "--force", env=held.env)
    held.reached()
    (_quarantine(repo) / "notes.md").write_text("the final version, written last\n")
    held.go()
    assert running.wait(timeout=30) == 0
    assert _snapshot_file(repo, "notes.md") == b"the final version, written last\n"


def test_a_commit_only_the_worktrees_head_reflog_holds_is_kept(
    repo: Path, cli, worktree: Path
) -> None:
    """Check: the worktree's own HEAD reflog (in its admin dir) is read for commits that
    removal would make unreachable; here a detached commit left behind by a checkout."""
    git(worktree, "checkout", "-q", "--detach")
    git(worktree, "commit", "-q", "--allow-empty", "-m", "detached, then left")
    lost = git(worktree, "rev-parse", "HEAD")
    git(worktree, "checkout", "-q", "lb/t/work")
    assert cli("discard", NAME).code == 0
    snapshot = git(repo, "for-each-ref", "--format=%(objectname)", "refs/laneboard/")
    assert (
        subprocess.run(
            ["git", "merge-base", "--is-ancestor", lost, snapshot], cwd=repo, check=False
        ).returncode
        == 0
    )


def test_an_edited_copy_is_work_not_laneboards(repo: Path, cli) -> None:
    """Check: a file provisioning copied counts as laneboard's own only while its bytes are
    the copied ones."""
    (repo / ".env").write_text("KEY=1\n")
    (repo / ".laneboard.toml").write_text('[provision]\ncopy = [".env"]\n')
    assert cli("new", NAME, "--no-start").code == 0
    worktree = repo / ".worktrees" / NAME
    (worktree / ".env").write_text("KEY=edited in the task\n")
    refused = cli("discard", NAME)
    assert refused.code == 1
    assert "untracked file: .env" in refused.err


def test_a_copy_never_overwrites_what_the_checkout_holds(repo: Path, cli) -> None:
    """Check: a path already in the new worktree (here a tracked file) is not copied over."""
    (repo / "settings.local").write_text("tracked version\n")
    git(repo, "add", "settings.local")
    git(repo, "commit", "-q", "-m", "tracked")
    (repo / "settings.local").write_text("the root's uncommitted edit\n")
    (repo / ".laneboard.toml").write_text('[provision]\ncopy = ["*.local"]\n')
    assert cli("new", NAME, "--no-start").code == 0
    worktree = repo / ".worktrees" / NAME
    assert (worktree / "settings.local").read_text() == "tracked version\n"
    events = json.loads(cli("log", NAME, "--json").out)["events"]
    copied = next(e["data"] for e in events if e["kind"] == "files.copied")
    assert copied["skipped"] == ["settings.local (already in the worktree)"]


def test_a_branch_checked_out_or_rebased_elsewhere_is_kept(
    repo: Path, cli, worktree: Path, tmp_path: Path
) -> None:
    """Checks: the branch is deleted nowhere it is in use: checked out in another worktree, or
    being rebased in one (git's own marker files are read)."""
    git(worktree, "checkout", "-q", "--detach")
    other = tmp_path / "other"
    git(repo, "worktree", "add", "-q", str(other), "lb/t/work")
    assert cli("discard", NAME).code == 0
    assert git(repo, "rev-parse", "--verify", "-q", "lb/t/work") != ""
    kept = [
        e
        for e in json.loads(cli("log", NAME, "--json").out)["events"]
        if e["kind"] == "branch.kept"
    ]
    assert kept[0]["data"]["reasons"] == [f"branch lb/t/work in use: checked out at {other}"]


def test_a_branch_under_a_rebase_elsewhere_is_kept(repo: Path, cli, worktree: Path) -> None:
    (worktree / "a.txt").write_text("task side\n")
    git(worktree, "add", "a.txt")
    git(worktree, "commit", "-q", "-m", "task")
    (repo / "a.txt").write_text("root side\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "root")
    git(worktree, "checkout", "-q", "--detach")
    stopped = subprocess.run(["git", "rebase", "main", "lb/t/work"], cwd=repo, capture_output=True)
    assert stopped.returncode != 0 and (repo / ".git" / "rebase-merge").is_dir()  # a conflict
    result = cli("discard", NAME, "--force")
    assert result.code == 0, result.err
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/lb/t/work") != ""
    kept = [
        e
        for e in json.loads(cli("log", NAME, "--json").out)["events"]
        if e["kind"] == "branch.kept"
    ]
    assert any("rebase-merge in" in r for r in kept[0]["data"]["reasons"])
    subprocess.run(["git", "rebase", "--abort"], cwd=repo, check=False)
