"""One scenario for each safety check that had no test failing when the check is deleted: each
test here was run with its check deleted (or neutralised) and failed, and passes with it.

Real git in temporary directories, the laneboard CLI (in this process, or as a real process
when it must be killed or held), real bwrap. A moment that needs exact interleaving is held at
a `LANEBOARD_PAUSE` checkpoint or made by a `LANEBOARD_FAULT` crash; where no checkpoint lies
inside the step (a file changing while it is hashed, a ref taken while a snapshot is written),
the command runs in this process with the one function that step calls wrapped to act at that
moment. Nothing sleeps: every wait is on an event, with a deadline that only turns a hang into
a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laneboard.core.adapters import safefs, snapshot
from laneboard.core.operations import discard
from tests.conftest import DEADLINE, git
from tests.procs import started


def _show(cli, name: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    found = cli("show", name, "--json")
    assert found.code == 0, found.err
    document: dict[str, Any] = json.loads(found.out)
    return document


def _events(cli, name: str, kind: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    logged = json.loads(cli("log", name, "--json").out)["events"]
    return [e["data"] for e in logged if e["kind"] == kind]


def _worktrees(repo: Path) -> str:
    return git(repo, "worktree", "list", "--porcelain")


def _snapshots(repo: Path) -> list[str]:
    """The snapshot refs, oldest first (by their number)."""
    found = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/snapshots/")
    return sorted(found.splitlines(), key=lambda ref: int(ref.rsplit("/", 1)[1]))


def _saved(repo: Path, ref: str, name: str) -> bytes:
    """The bytes of `name` in the snapshot `ref`."""
    return subprocess.run(
        ["git", "cat-file", "blob", f"{ref}:{name}"], cwd=repo, capture_output=True, check=True
    ).stdout


@pytest.fixture
def task(repo: Path, cli) -> Path:  # type: ignore[no-untyped-def]
    """Task `t`, provisioned, with an untracked `notes.md` (so discarding it takes --force)."""
    assert cli("new", "t", "--no-start").code == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "notes.md").write_text("first draft\n")
    return worktree


# --- provisioning and its rollback ------------------------------------------------------------


def test_doctor_keeps_the_branch_under_a_worktree_it_keeps(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Check (rollback `_undo`): a branch checked out in some worktree is kept. Here git was
    killed half-way through the checkout of an interrupted provisioning: `doctor --fix` keeps
    the incomplete worktree (not pristine, so not laneboard's to remove) and must keep the
    branch it has checked out, not delete it from under it."""
    crashed = cli("new", "w", "--no-start", env={"LANEBOARD_FAULT": "provision.after_branch"})
    assert crashed.code == -9
    task_id = _show(cli, "w")["id"]
    tip = git(repo, "rev-parse", "lb/w/work")
    worktree = repo / ".worktrees" / "w"
    reason = f"laneboard: initializing task {task_id}"
    git(repo, "worktree", "add", "-q", "--lock", "--reason", reason, str(worktree), "lb/w/work")
    (worktree / "README.md").unlink()  # the checkout never wrote it

    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]

    assert [(f["kind"], f["fixed"]) for f in fixed] == [
        ("interrupted-provisioning", "marked failed")
    ]
    assert worktree.is_dir()
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/lb/w/work") == tip
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/lb/w/work"
    assert git(worktree, "rev-parse", "HEAD") == tip  # not an unborn branch
    (failed,) = _events(cli, "w", "task.failed")
    assert f"branch lb/w/work kept: checked out at {worktree}" in failed["kept"]


def test_new_refuses_an_existing_empty_directory_at_its_path(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Check (provision `create`): an existing directory is refused, even an empty one (git
    itself adds a worktree into an empty directory: only the check stops `new` from taking
    over someone's directory)."""
    theirs = repo / ".worktrees" / "mine"
    theirs.mkdir(parents=True)
    made = theirs.stat()

    refused = cli("new", "mine", "--no-start")

    assert refused.code == 1
    assert f"{theirs} already exists; laneboard never reuses a directory" in refused.err
    assert list(theirs.iterdir()) == []
    assert (theirs.stat().st_ino, theirs.stat().st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    assert str(theirs) not in _worktrees(repo)
    assert git(repo, "branch", "--list", "lb/mine/work") == ""
    assert json.loads(cli("ls", "--all", "--json").out)["tasks"] == []


def test_a_worktree_someone_made_at_the_tasks_path_survives_its_rollback(
    repo: Path, cli, pause
) -> None:  # type: ignore[no-untyped-def]
    """Check (rollback `_undo`): the worktree is removed only if laneboard created it. Someone
    adds their own worktree at the task's path just after laneboard created the branch (clean,
    at the same commit, holding only an ignored file: nothing a snapshot would keep): `git
    worktree add` then fails, and the rollback must leave their worktree and file alone."""
    (repo / ".git" / "info" / "exclude").write_text("*.key\n")
    held = pause("provision.after_branch")
    running = started(["new", "boom", "--no-start"], repo, held.env)
    held.reached()
    theirs = repo / ".worktrees" / "boom"
    git(repo, "worktree", "add", "-q", "-b", "theirs", str(theirs))
    (theirs / "deploy.key").write_text("their secret\n")
    held.go()
    _, err = running.communicate(timeout=DEADLINE)

    assert running.returncode == 1, err
    assert f"provisioning boom failed: git worktree failed: fatal: '{theirs}' already exists" in err
    assert (theirs / "deploy.key").read_text() == "their secret\n"
    assert f"worktree {theirs}\n" in _worktrees(repo)
    assert git(theirs, "symbolic-ref", "HEAD") == "refs/heads/theirs"
    assert _show(cli, "boom")["state"] == "failed"
    assert git(repo, "branch", "--list", "lb/boom/work") == ""  # its own branch did go


# --- snapshots ------------------------------------------------------------------------------


def test_a_snapshot_never_overwrites_a_ref_taken_meanwhile(
    repo: Path, cli, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `_save`): the snapshot ref is created by compare-and-swap from
    "absent". Someone takes the ref between the moment discard picks its number and the moment
    it writes it: the discard stops there, their ref stays as it is, and nothing is removed."""
    theirs = git(repo, "commit-tree", "-m", "someone else's", "HEAD^{tree}")
    taken: list[str] = []
    real = discard.next_ref

    def next_ref_then_taken(*args: Any) -> tuple[int, str]:
        n, ref = real(*args)
        if not taken:
            git(repo, "update-ref", ref, theirs)
            taken.append(ref)
        return n, ref

    with monkeypatch.context() as patched:
        patched.setattr(discard, "next_ref", next_ref_then_taken)
        stopped = cli("discard", "t", "--force")

    assert stopped.code == 1
    assert f"cannot lock ref '{taken[0]}': reference already exists" in stopped.err
    assert git(repo, "rev-parse", taken[0]) == theirs
    # Nothing was removed: the worktree waits in its quarantine for `doctor --fix`.
    (quarantine,) = (repo / ".worktrees").glob(".discarding-*")
    assert (quarantine / "notes.md").read_text() == "first draft\n"
    assert _show(cli, "t")["state"] == "discarding"


def test_a_file_that_changes_while_it_is_hashed_is_read_again(
    repo: Path, cli, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `_hash_file`): a file whose inode, size or times differ after it was
    read is read again. Here the agent finishes writing `notes.md` just as discard reads it:
    the snapshot must hold what is on disk when the worktree goes, not the draft read first."""
    real = safefs.Below.chunks
    rewritten: list[str] = []

    def chunks_then_rewritten(self: safefs.Below, relative: str) -> Iterator[bytes]:
        yield from real(self, relative)
        if relative == "notes.md" and not rewritten:
            rewritten.append(relative)
            with open(os.path.join(self.top, relative), "w") as handle:
                handle.write("the final version, written while it was read\n")

    with monkeypatch.context() as patched:
        patched.setattr(safefs.Below, "chunks", chunks_then_rewritten)
        done = cli("discard", "t", "--force")

    assert done.code == 0, done.err
    assert rewritten == ["notes.md"]
    expected = b"the final version, written while it was read\n"
    assert _saved(repo, _snapshots(repo)[-1], "notes.md") == expected
    assert cli("restore", "t").code == 0
    assert (task / "notes.md").read_bytes() == expected


def test_a_leftover_that_changed_after_it_was_saved_is_saved_again_before_it_goes(
    repo: Path, cli, task: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Check (snapshot `remove_saved`, discard `_remove_leftovers`): a file left after git's
    removal is deleted only if it is exactly as it was saved. A discard crashed with git's
    removal half done (the worktree's `.git` gone, its files still there); as `doctor --fix`
    saves what is left, something appends to a file: that file stays until a snapshot holds its
    new bytes."""
    crashed = cli("discard", "t", "--force", env={"LANEBOARD_FAULT": "discard.before_remove"})
    assert crashed.code == -9
    (quarantine,) = (repo / ".worktrees").glob(".discarding-*")
    (quarantine / ".git").unlink()  # what git removes first
    real = snapshot.of_files
    appended: list[Path] = []

    def saved_then_appended(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        if not appended:
            with open(quarantine / "notes.md", "a") as handle:
                handle.write("a line written after it was saved\n")
            appended.append(quarantine / "notes.md")
        return found

    with monkeypatch.context() as patched:
        patched.setattr(snapshot, "of_files", saved_then_appended)
        fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]

    assert [(f["kind"], f["fixed"]) for f in fixed] == [("interrupted-discard", "finished")]
    assert appended and not quarantine.exists()
    expected = b"first draft\na line written after it was saved\n"
    assert _saved(repo, _snapshots(repo)[-1], "notes.md") == expected
