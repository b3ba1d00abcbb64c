"""A crash at every step of provisioning, then `laneboard doctor`: nothing orphaned, nothing of
anyone else's removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laneboard.core.adapters.faults import POINTS
from tests.conftest import git

PROVISION_POINTS = [p for p in POINTS if p.startswith("provision.")]


def _state(repo: Path) -> tuple[str, str, list[str]]:
    refs = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    worktrees = git(repo, "worktree", "list", "--porcelain")
    admin = repo / ".git" / "worktrees"
    return refs, worktrees, sorted(p.name for p in admin.iterdir()) if admin.exists() else []


@pytest.mark.parametrize("point", PROVISION_POINTS)
def test_crash_then_doctor_fix_leaves_nothing_orphaned(point: str, repo: Path, cli) -> None:
    git(repo, "branch", "someone-elses")
    bystander = repo / ".worktrees" / "bystander"
    bystander.mkdir(parents=True)
    (bystander / "keep.txt").write_text("not laneboard's\n")
    before = _state(repo)

    crashed = cli("new", "boom", "--no-start", env={"LANEBOARD_FAULT": point})
    assert crashed.code == -9, crashed.err

    report = cli("doctor", "--json")
    assert report.code == 1
    kinds = {(f["kind"], f["task"]) for f in json.loads(report.out)["findings"]}
    assert ("interrupted-provisioning", "boom") in kinds
    assert ("unregistered-dir", None) in kinds  # the bystander is reported, never touched

    fixed = cli("doctor", "--fix", "--json")
    outcome = {f["task"]: f["fixed"] for f in json.loads(fixed.out)["findings"] if f["task"]}
    task = json.loads(cli("show", "boom", "--json").out)
    if point in ("provision.after_intent", "provision.after_branch"):
        assert outcome == {"boom": "marked failed"}
        assert task["state"] == "failed"
        assert _state(repo) == before
    else:
        assert outcome == {"boom": "finished"}
        assert task["state"] == "provisioned"
        assert task["identity"] is not None
        assert cli("verify", "boom").code == 0
        assert "locked" not in git(repo, "worktree", "list", "--porcelain")
        assert git(repo, "rev-parse", "lb/boom/work") == git(repo, "rev-parse", "main")
    assert (bystander / "keep.txt").read_text() == "not laneboard's\n"
    assert git(repo, "rev-parse", "someone-elses") == git(repo, "rev-parse", "main")
    # After the fix only the bystander remains to report.
    after = json.loads(cli("doctor", "--json").out)["findings"]
    assert [f["kind"] for f in after] == ["unregistered-dir"]


def test_doctor_does_not_touch_a_provisioning_that_is_still_running(repo: Path, cli) -> None:
    """A task whose provisioning process is alive is reported as in progress, not fixed."""
    import os

    from laneboard.core.adapters import procs
    from laneboard.core.adapters.ledger import Ledger, new_task_id
    from laneboard.core.domain.models import Actor, TaskState
    from laneboard.core.operations.repos import open_repo

    ledger = Ledger(Path(os.environ["LANEBOARD_HOME"]) / "ledger.sqlite3")
    ctx = open_repo(ledger, repo, register=True, actor=Actor.CLI)
    pid, start = procs.me()
    ledger.insert_task(
        {
            "id": new_task_id(),
            "repo_id": ctx.repo.id,
            "name": "busy",
            "state": TaskState.PROVISIONING.value,
            "base_ref": "HEAD",
            "base_sha": git(repo, "rev-parse", "HEAD"),
            "branch": "lb/busy/work",
            "area": str(repo / ".worktrees"),
            "worktree_path": str(repo / ".worktrees" / "busy"),
            "owner_pid": pid,
            "owner_start": start,
        },
        Actor.CLI,
        {},
    )
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [(f["kind"], f["fixed"]) for f in fixed] == [("provisioning-in-progress", None)]
    assert json.loads(cli("show", "busy", "--json").out)["state"] == "provisioning"


def test_unowned_worktree_in_the_area_is_reported_and_never_deleted(repo: Path, cli) -> None:
    assert cli("init").code == 0
    git(repo, "worktree", "add", "-q", "-b", "hand-made", str(repo / ".worktrees" / "hand"))
    (repo / ".worktrees" / "hand" / "work.txt").write_text("mine\n")
    found = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [(f["kind"], f["fixed"]) for f in found] == [("unowned-worktree", None)]
    assert (repo / ".worktrees" / "hand" / "work.txt").read_text() == "mine\n"
    assert "hand-made" in git(repo, "branch")


def test_missing_worktree_and_branch_are_reported(repo: Path, cli) -> None:
    assert cli("new", "gone", "--no-start").code == 0
    git(repo, "worktree", "remove", str(repo / ".worktrees" / "gone"))
    git(repo, "branch", "-D", "lb/gone/work")
    kinds = sorted(f["kind"] for f in json.loads(cli("doctor", "--json").out)["findings"])
    assert kinds == ["missing-branch", "missing-worktree"]


def test_doctor_on_a_healthy_board_says_so(repo: Path, cli) -> None:
    assert cli("new", "fine", "--no-start").code == 0
    result = cli("doctor")
    assert result.code == 0
    assert result.out.strip() == "no problems found"


def _interrupt_inside_worktree_add(repo: Path, cli) -> str:
    """A crash after laneboard created the branch and git added the worktree, but before the
    ledger heard of it (as if laneboard died while git was finishing)."""
    crashed = cli("new", "w", "--no-start", env={"LANEBOARD_FAULT": "provision.after_branch"})
    assert crashed.code == -9
    task_id = json.loads(cli("show", "w", "--json").out)["id"]
    path = repo / ".worktrees" / "w"
    git(
        repo,
        "worktree",
        "add",
        "-q",
        "--lock",
        "--reason",
        f"laneboard: initializing task {task_id}",
        str(path),
        "lb/w/work",
    )
    return task_id


def test_worktree_from_an_interrupted_add_is_finished_when_pristine(repo: Path, cli) -> None:
    _interrupt_inside_worktree_add(repo, cli)
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [(f["kind"], f["fixed"]) for f in fixed] == [("interrupted-provisioning", "finished")]
    assert json.loads(cli("show", "w", "--json").out)["state"] == "provisioned"
    assert cli("verify", "w").code == 0


def test_incomplete_worktree_from_an_interrupted_add_is_not_adopted(repo: Path, cli) -> None:
    """Regression: doctor took a half-checked-out worktree (git killed mid-checkout) for a
    finished one and marked it provisioned."""
    _interrupt_inside_worktree_add(repo, cli)
    (repo / ".worktrees" / "w" / "README.md").unlink()  # the checkout never wrote it
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["kind"] for f in fixed] == ["interrupted-provisioning"]
    task = json.loads(cli("show", "w", "--json").out)
    assert task["state"] == "failed"
    # Not pristine, so not force-removed: kept and reported, nothing deleted by guesswork.
    assert (repo / ".worktrees" / "w").is_dir()
    log = json.loads(cli("log", "w", "--json").out)
    assert "worktree" in log["events"][-1]["data"]["reason"]


def test_copied_ignored_file_does_not_block_the_undo(repo: Path, cli) -> None:
    """Regression: an ignored file that provisioning itself copied (`.env`) counted as someone's
    work, so the undo of a failed provisioning kept the worktree and branch."""
    (repo / ".gitignore").write_text(".env\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore .env")
    (repo / ".env").write_text("SECRET=1\n")
    (repo / ".laneboard.toml").write_text('[provision]\ncopy = [".env"]\nsetup = "exit 3"\n')
    before = _state(repo)
    crashed = cli("new", "e", "--no-start", env={"LANEBOARD_FAULT": "provision.after_copy"})
    assert crashed.code == -9
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    outcome = [f["fixed"] for f in fixed if f["task"] == "e"]
    assert outcome and outcome[0].startswith("not fixed: provisioning e failed: setup")
    assert _state(repo) == before
    assert json.loads(cli("show", "e", "--json").out)["state"] == "failed"
