"""Regressions from reviewing discard and restore for lost work: each test names the way work
could be lost and proves it no longer is."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git, is_ancestor, make_repo

PROTOCOL = ("-c", "protocol.file.allow=always")


def _new(cli, name: str = "t") -> Path:
    assert cli("new", name, "--no-start").code == 0
    return Path(json.loads(cli("show", name, "--json").out)["worktree_path"])


def _snapshot(repo: Path) -> str:
    refs = git(repo, "for-each-ref", "--format=%(objectname)", "refs/laneboard/snapshots/")
    return refs.splitlines()[-1]


def _reach(repo: Path, commit: str, of: str) -> bool:
    return is_ancestor(repo, commit, of)


def test_commit_only_in_the_worktrees_reflog_is_kept_by_the_snapshot(repo: Path, cli) -> None:
    """Was lost: `git reset --hard HEAD~1` leaves a commit only in the worktree's HEAD reflog,
    which `git worktree remove` deletes."""
    worktree = _new(cli)
    (worktree / "w.txt").write_text("precious\n")
    git(worktree, "add", "w.txt")
    git(worktree, "commit", "-q", "-m", "precious")
    precious = git(worktree, "rev-parse", "HEAD")
    git(worktree, "reset", "-q", "--hard", "HEAD~1")
    result = cli("discard", "t")
    assert result.code == 0, result.err  # nothing only HEAD or the branch holds: no blocker
    assert _reach(repo, precious, _snapshot(repo))


def test_commit_under_a_per_worktree_ref_is_kept_by_the_snapshot(repo: Path, cli) -> None:
    worktree = _new(cli)
    git(worktree, "commit", "-q", "--allow-empty", "-m", "kept by refs/worktree")
    kept = git(worktree, "rev-parse", "HEAD")
    git(worktree, "update-ref", "refs/worktree/keep", "HEAD")
    git(worktree, "reset", "-q", "--hard", "HEAD~1")
    assert cli("discard", "t").code == 0
    assert _reach(repo, kept, _snapshot(repo))


def test_deinitialized_submodule_with_its_own_commits_blocks(repo: Path, cli, tmp_path) -> None:
    """Was lost: after `git submodule deinit`, the submodule's repository lives on only in the
    worktree's git dir (`modules/`), which removal deletes."""
    library = make_repo(tmp_path / "library")
    git(repo, *PROTOCOL, "submodule", "add", "-q", str(library), "sub")
    git(repo, "commit", "-q", "-m", "add submodule")
    worktree = _new(cli)
    git(worktree, *PROTOCOL, "submodule", "update", "-q", "--init")
    git(worktree / "sub", "commit", "-q", "--allow-empty", "-m", "only in the submodule")
    git(worktree, "submodule", "deinit", "-q", "-f", "sub")
    for args in (["discard", "t"], ["discard", "t", "--force"]):
        result = cli(*args)
        assert result.code == 1
        assert "  initialized submodule: sub (in " in result.err
    assert (repo / ".git" / "worktrees" / "t" / "modules" / "sub").is_dir()


def test_repository_inside_an_ignored_cache_directory_blocks(repo: Path, cli) -> None:
    """Was lost: `pip install -e git+…` clones into `.venv/src/pkg`; `.venv/` is a rebuildable
    cache, but the clone inside it holds history of its own."""
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore .venv")
    worktree = _new(cli)
    make_repo(worktree / ".venv" / "src" / "pkg")
    result = cli("discard", "t", "--force")
    assert result.code == 1
    assert "  repository nested inside: .venv/src/pkg/" in result.err
    assert (worktree / ".venv" / "src" / "pkg" / ".git").is_dir()


def test_a_branch_the_user_created_again_under_the_same_name_is_kept(repo: Path, cli) -> None:
    """Was deleted: the ledger's "created by laneboard" was stale once the user deleted the
    branch and created a new one with the same name."""
    worktree = _new(cli)
    git(worktree, "switch", "-q", "--detach")
    git(worktree, "branch", "-q", "-D", "lb/t/work")
    git(worktree, "switch", "-q", "-c", "lb/t/work")
    git(worktree, "commit", "-q", "--allow-empty", "-m", "mine")
    mine = git(worktree, "rev-parse", "HEAD")
    git(worktree, "switch", "-q", "--detach", "main")
    assert cli("discard", "t", "--force").code == 0
    assert git(repo, "rev-parse", "lb/t/work") == mine
    events = json.loads(cli("log", "t", "--json").out)["events"]
    kept = [e for e in events if e["kind"] == "branch.kept"]
    assert kept and "not created by laneboard" in kept[0]["data"]["reasons"][0]


def test_crlf_files_come_back_byte_for_byte(repo: Path, cli) -> None:
    """Was changed: snapshots went through git's filters, so CRLF endings came back as LF and an
    unstaged change that was only line endings disappeared."""
    git(repo, "config", "core.autocrlf", "input")
    (repo / ".gitattributes").write_text("*.txt text=auto\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    worktree = _new(cli)
    (worktree / "notes.txt").write_bytes(b"a\r\nb\r\n")
    (worktree / "README.md").write_bytes(b"hello\r\n")
    assert cli("discard", "t", "--force").code == 0
    assert cli("restore", "t").code == 0
    assert (worktree / "notes.txt").read_bytes() == b"a\r\nb\r\n"
    assert (worktree / "README.md").read_bytes() == b"hello\r\n"


def test_doctor_does_not_apply_a_snapshot_over_work_done_after_a_crashed_restore(
    repo: Path, cli
) -> None:
    """Was overwritten: `doctor --fix` finished a restore by writing the snapshot over files the
    user had edited since the crash."""
    worktree = _new(cli)
    (worktree / "notes.txt").write_text("saved\n")
    assert cli("discard", "t", "--force").code == 0
    crashed = cli("restore", "t", env={"LANEBOARD_FAULT": "provision.after_pin"})
    assert crashed.code == -9
    (worktree / "README.md").write_text("USER\n")
    (worktree / "notes.txt").write_text("mine\n")
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert fixed[0]["kind"] == "interrupted-provisioning"
    assert (worktree / "README.md").read_text() == "USER\n"
    assert (worktree / "notes.txt").read_text() == "mine\n"


def test_doctor_finishes_a_discard_only_on_its_own_terms(repo: Path, cli) -> None:
    """Was removed: a discard without --force, interrupted, then `doctor --fix` removed work the
    user added after the crash (it only stopped for blockers --force could not lift)."""
    worktree = _new(cli)
    crashed = cli("discard", "t", env={"LANEBOARD_FAULT": "discard.after_intent"})
    assert crashed.code == -9
    (worktree / "todo.txt").write_text("new work\n")
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert fixed[0]["fixed"].startswith("not fixed: refusing to discard t")
    assert json.loads(cli("show", "t", "--json").out)["state"] == "retained"
    assert (worktree / "todo.txt").read_text() == "new work\n"


def test_unborn_head_is_refused_cleanly(repo: Path, cli) -> None:
    """Was an internal error that left the task stuck in `discarding`."""
    worktree = _new(cli)
    git(worktree, "update-ref", "-d", "refs/heads/lb/t/work")
    result = cli("discard", "t", "--force")
    assert result.code == 1
    assert "  HEAD has no commit: its branch was deleted" in result.err
    assert json.loads(cli("show", "t", "--json").out)["state"] == "provisioned"
    assert "internal error" not in cli("doctor").err


def test_a_snapshot_ref_already_taken_is_never_overwritten(repo: Path, cli) -> None:
    """Was stuck: after a crash between writing the snapshot ref and recording it, the next
    discard tried the same ref name and failed forever."""
    worktree = _new(cli)
    task_id = json.loads(cli("show", "t", "--json").out)["id"]
    stray = f"refs/laneboard/snapshots/{task_id}/1"
    git(repo, "update-ref", stray, "main")
    (worktree / "n.txt").write_text("n\n")
    assert cli("discard", "t", "--force").code == 0
    assert git(repo, "rev-parse", stray) == git(repo, "rev-parse", "main")
    assert git(repo, "rev-parse", "--verify", f"refs/laneboard/snapshots/{task_id}/2") != ""
