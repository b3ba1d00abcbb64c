"""`laneboard new --no-start`: provisioning checked on disk, refusals that change nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, git


def _refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


def _worktrees(repo: Path) -> str:
    return git(repo, "worktree", "list", "--porcelain")


def test_new_creates_branch_worktree_exclude_and_ownership_facts(repo: Path, cli) -> None:
    head = git(repo, "rev-parse", "HEAD")
    result = cli("new", "fix-login", "--no-start", "--json")
    assert result.code == 0, result.err
    task = json.loads(result.out)
    path = repo / ".worktrees" / "fix-login"
    assert task["state"] == "provisioned"
    assert task["worktree_path"] == str(path)
    assert git(repo, "rev-parse", "refs/heads/lb/fix-login/work") == head
    assert task["base_sha"] == head == task["branch_tip_at_creation"]
    assert task["branch_created_by_us"] is True
    assert task["worktree_created_by_us"] is True
    assert f"worktree {path}" in _worktrees(repo)
    assert (path / ".git").is_file()
    assert (path / ".git").read_text().startswith("gitdir: ")
    assert git(path, "symbolic-ref", "HEAD") == "refs/heads/lb/fix-login/work"
    assert "/.worktrees/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""
    stat = path.stat()
    assert task["identity"]["dir_ino"] == stat.st_ino
    assert task["identity"]["gitfile_ino"] == (path / ".git").stat().st_ino
    assert task["worktree_admin_name"] == "fix-login"
    # The worktree is unlocked once provisioning has finished.
    assert "locked" not in _worktrees(repo)


def test_new_from_base_ref_pins_that_sha(repo: Path, cli) -> None:
    first = git(repo, "rev-parse", "HEAD")
    (repo / "b.txt").write_text("b\n")
    git(repo, "add", "b.txt")
    git(repo, "commit", "-q", "-m", "second")
    result = cli("new", "old", "--no-start", "--base", "HEAD~1", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out)["base_sha"] == first
    assert git(repo, "rev-parse", "lb/old/work") == first


def test_exclude_line_is_added_once(repo: Path, cli) -> None:
    assert cli("new", "a", "--no-start").code == 0
    assert cli("new", "b", "--no-start").code == 0
    lines = (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert lines.count("/.worktrees/") == 1


def test_pre_existing_branch_is_refused_and_untouched(repo: Path, cli) -> None:
    git(repo, "branch", "lb/taken/work")
    before = (_refs(repo), _worktrees(repo))
    result = cli("new", "taken", "--no-start")
    assert result.code == 1
    assert result.err.strip() == (
        "laneboard: branch lb/taken/work already exists; "
        "laneboard only works on branches it creates"
    )
    assert (_refs(repo), _worktrees(repo)) == before
    assert not (repo / ".worktrees" / "taken").exists()
    assert json.loads(cli("ls", "--json", "--all").out)["tasks"] == []


def test_pre_existing_directory_is_refused_and_untouched(repo: Path, cli) -> None:
    mine = repo / ".worktrees" / "mine"
    mine.mkdir(parents=True)
    (mine / "precious.txt").write_text("keep me\n")
    before = (_refs(repo), _worktrees(repo))
    result = cli("new", "mine", "--no-start")
    assert result.code == 1
    assert "already exists" in result.err
    assert (mine / "precious.txt").read_text() == "keep me\n"
    assert (_refs(repo), _worktrees(repo)) == before


def test_bad_names_are_refused_with_one_line_and_change_nothing(repo: Path, cli) -> None:
    before = (_refs(repo), _worktrees(repo), sorted(p.name for p in repo.iterdir()))
    for name in ["..", "a/b", "-x", "x.lock", "", "a" * 200, "UPPER"]:
        result = cli("new", name, "--no-start")
        assert result.code in (1, 2), name
        assert len(result.err.strip().splitlines()) == 1, result.err
        assert "Traceback" not in result.err
    assert (_refs(repo), _worktrees(repo), sorted(p.name for p in repo.iterdir())) == before


def test_name_taken_by_a_live_task_is_refused(repo: Path, cli) -> None:
    assert cli("new", "dup", "--no-start").code == 0
    result = cli("new", "dup", "--no-start")
    assert result.code == 1
    assert "'dup' is taken by a live task" in result.err


def test_unknown_base_is_refused_before_anything_is_written(repo: Path, cli) -> None:
    result = cli("new", "x", "--no-start", "--base", "no-such-ref")
    assert result.code == 1
    assert "'no-such-ref' does not name a commit" in result.err
    assert json.loads(cli("ls", "--json", "--all").out)["tasks"] == []


def test_two_processes_creating_the_same_name_give_one_task(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    argv = [sys.executable, "-P", "-m", "laneboard", "new", "race", "--no-start"]
    procs = [
        subprocess.Popen(argv, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    results = [(p.wait(), p.stderr.read().decode()) for p in procs if p.stderr]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 1], results
    refusal = next(err for code, err in results if code == 1)
    assert len(refusal.strip().splitlines()) == 1
    assert "Traceback" not in refusal
    tasks = json.loads(
        subprocess.run(
            [sys.executable, "-P", "-m", "laneboard", "ls", "--json", "--all"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["tasks"]
    assert [t["name"] for t in tasks] == ["race"]
    assert tasks[0]["state"] == "provisioned"


def test_many_processes_share_the_ledger(repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    names = [f"t{i}" for i in range(6)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-P", "-m", "laneboard", "new", name, "--no-start"],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for name in names
    ]
    for proc in procs:
        assert proc.wait() == 0, proc.stderr.read().decode() if proc.stderr else ""
    tasks = json.loads(
        subprocess.run(
            [sys.executable, "-P", "-m", "laneboard", "ls", "--json"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )["tasks"]
    assert sorted(t["name"] for t in tasks) == names
    assert all(t["state"] == "provisioned" for t in tasks)


def test_repo_is_found_from_a_worktree_and_from_repo_option(
    repo: Path, cli, tmp_path: Path
) -> None:
    assert cli("new", "a", "--no-start").code == 0
    inside = repo / ".worktrees" / "a"
    listed = json.loads(cli("ls", "--json", cwd=inside).out)["tasks"]
    assert [t["name"] for t in listed] == ["a"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert cli("--repo", str(repo), "show", "a", cwd=elsewhere).code == 0
    assert cli("show", "a", "--repo", str(repo), cwd=elsewhere).code == 0


def test_sibling_area_for_tools_that_search_parent_directories(repo: Path, cli) -> None:
    (repo / ".laneboard.toml").write_text('[worktrees]\narea = "sibling"\n')
    result = cli("new", "s", "--no-start", "--json")
    assert result.code == 0, result.err
    expected = repo.parent / "repo.worktrees" / "s"
    assert json.loads(result.out)["worktree_path"] == str(expected)
    assert (expected / ".git").is_file()
    assert cli("verify", "s").code == 0
    assert "/.worktrees/" not in (repo / ".git" / "info" / "exclude").read_text()


def test_allowlisted_untracked_files_are_copied(repo: Path, cli) -> None:
    (repo / ".env").write_text("SECRET=1\n")
    (repo / "notes.txt").write_text("not copied\n")
    (repo / ".laneboard.toml").write_text('[provision]\ncopy = [".env"]\n')
    assert cli("new", "c", "--no-start").code == 0
    worktree = repo / ".worktrees" / "c"
    assert (worktree / ".env").read_text() == "SECRET=1\n"
    assert not (worktree / "notes.txt").exists()


def test_setup_command_runs_in_the_worktree(repo: Path, cli) -> None:
    (repo / ".laneboard.toml").write_text(
        '[provision]\nsetup = "echo \\"$LANEBOARD_TASK\\" > setup-ran.txt"\n'
    )
    assert cli("new", "s1", "--no-start").code == 0
    assert (repo / ".worktrees" / "s1" / "setup-ran.txt").read_text() == "s1\n"


def test_failed_setup_rolls_back_exactly_what_the_task_created(repo: Path, cli) -> None:
    (repo / ".laneboard.toml").write_text(
        '[provision]\nsetup = ["sh", "-c", "touch made-by-setup; echo boom >&2; exit 3"]\n'
    )
    git(repo, "branch", "unrelated")
    before = (_refs(repo), _worktrees(repo))
    result = cli("new", "bad", "--no-start")
    assert result.code == 1
    assert "setup command exited with 3: boom" in result.err
    saved = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/snapshots/")
    # What was in the worktree beyond its checkout (here setup's own file; it could as well be
    # an operator's edit made while a long setup ran) is saved before the worktree goes.
    assert git(repo, "ls-tree", "-r", "--name-only", saved).splitlines() == [
        "README.md",
        "made-by-setup",
    ]
    git(repo, "update-ref", "-d", saved)
    assert (_refs(repo), _worktrees(repo)) == before
    assert not (repo / ".worktrees" / "bad").exists()
    assert not (repo / ".git" / "worktrees" / "bad").exists()
    log = json.loads(cli("log", "bad", "--json").out)
    assert log["state"] == "failed"
    # The setup's lane is given back by its lease's own bookkeeping, which may be journalled
    # while the rollback runs: the rollback's own steps are what must come in this order.
    kinds = [e["kind"] for e in log["events"] if not e["kind"].startswith("lease.")]
    assert kinds[-5:] == [
        "rollback.intent",
        "snapshot.created",
        "worktree.removed",
        "branch.deleted",
        "task.failed",
    ]
    # The name is free again; the failed record stays.
    (repo / ".laneboard.toml").unlink()
    assert cli("new", "bad", "--no-start").code == 0
    assert len(json.loads(cli("ls", "--json", "--all").out)["tasks"]) == 2


def test_bad_config_is_reported_with_file_and_field(repo: Path, cli) -> None:
    (repo / ".laneboard.toml").write_text('[worktrees]\narea = "nowhere"\n')
    result = cli("new", "x", "--no-start")
    assert result.code == 1
    assert result.err.startswith(f"laneboard: {repo / '.laneboard.toml'}: field worktrees.area")
    assert len(result.err.strip().splitlines()) == 1


def test_ls_in_an_unregistered_repo_says_so_and_succeeds(repo: Path, cli) -> None:
    result = cli("ls")
    assert result.code == 0
    assert result.out.startswith(f"no tasks: {repo} is not registered with laneboard")
    assert json.loads(cli("ls", "--json").out)["tasks"] == []


def test_failed_worktree_add_leaves_no_branch_or_worktree(repo: Path, cli) -> None:
    """Regression: git creates the branch before checking out; a failing post-checkout hook made
    `worktree add` fail after that, and the branch and a locked worktree were left behind
    unreported."""
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\nexit 1\n")
    hook.chmod(0o755)
    before = (_refs(repo), _worktrees(repo))
    result = cli("new", "a", "--no-start")
    assert result.code == 1
    assert "Traceback" not in result.err and "internal error" not in result.err
    assert (_refs(repo), _worktrees(repo)) == before
    assert not (repo / ".git" / "worktrees" / "a").exists()
    assert not (repo / ".worktrees" / "a").exists()
    assert cli("doctor").out.strip() == "no problems found"
    hook.unlink()
    assert cli("new", "a", "--no-start").code == 0


def test_an_area_that_is_a_file_is_refused_cleanly(repo: Path, cli) -> None:
    """Regression: an OSError (here: the area is a file) skipped rollback and left the task in
    `provisioning` with an internal error. Now the area is checked before anything is written."""
    (repo / ".worktrees").write_text("not a directory\n")
    before = _refs(repo)
    result = cli("new", "a", "--no-start")
    assert result.code == 1
    assert result.err == (
        f"laneboard: the worktree area {repo / '.worktrees'} exists and is not a directory\n"
    )
    assert _refs(repo) == before
    assert cli("show", "a").code == 1


def test_refused_new_does_not_register_the_repo(repo: Path, cli) -> None:
    assert cli("new", "Bad Name", "--no-start").code == 1
    assert cli("new", "ok", "--no-start", "--base", "nope").code == 1
    assert cli("ls").out.startswith("no tasks: ")
    assert "not registered" in cli("ls").out


def test_git_failure_reports_git_s_error_line(repo: Path, cli) -> None:
    git(repo, "branch", "lb")  # `lb/a` cannot exist beside a branch named `lb`
    result = cli("new", "a", "--no-start")
    assert result.code == 1
    assert "Preparing worktree" not in result.err
    assert result.err == (
        "laneboard: provisioning a failed: git update-ref failed: fatal: update_ref failed for "
        "ref 'refs/heads/lb/a/work': cannot lock ref 'refs/heads/lb/a/work': "
        "'refs/heads/lb' exists; cannot create 'refs/heads/lb/a/work'\n"
    )
