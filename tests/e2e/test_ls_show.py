"""`ls` and `show` say what each task did: its worktree's changes, its commits against its
target, its lane, its health; `show` leads with that and keeps the ledger's internals for
`--verbose` and `--json`."""

from __future__ import annotations

import json
from pathlib import Path

from laneboard import __version__
from tests.conftest import git
from tests.procs import exec_agent


def test_ls_and_show_follow_edits_and_commits(repo: Path, cli) -> None:
    """Was unchanged after edits and commits in a worktree."""
    assert cli("new", "a", "--no-start").code == 0
    worktree = repo / ".worktrees" / "a"
    before = cli("ls").out
    assert "clean" in before and "initial" in before

    (worktree / "README.md").write_text("changed\n")
    (worktree / "new.txt").write_text("new\n")
    (worktree / "staged.txt").write_text("staged\n")
    git(worktree, "add", "staged.txt")
    listed = cli("ls").out
    assert "1 staged, 1 modified, 1 untracked" in listed
    shown = cli("show", "a").out.splitlines()
    assert shown[:2] == [
        "task:         a (" + json.loads(cli("show", "a", "--json").out)["id"] + ")",
        "state:        provisioned",
    ]
    assert "holds:        1 staged, 1 modified, 1 untracked, 0 ahead, 0 behind" in shown

    git(worktree, "commit", "-q", "-am", "the task's commit")
    git(repo, "commit", "-q", "--allow-empty", "-m", "main moves on")
    document = json.loads(cli("show", "a", "--json").out)
    assert document["target"] == "main"
    assert (document["git"]["ahead"], document["git"]["behind"]) == (1, 1)
    assert document["git"]["last_commit"]["subject"] == "the task's commit"
    assert (document["git"]["staged"], document["git"]["untracked"]) == (0, 1)
    assert "1 untracked, 1 ahead, 1 behind" in cli("ls").out
    assert "the task's commit" in cli("ls").out


def test_show_leads_with_what_the_task_did_and_hides_internals(repo: Path, cli) -> None:
    assert cli("new", "a", "--no-start").code == 0
    plain = cli("show", "a").out
    assert "dir_ino" not in plain and "worktree_admin_name" not in plain
    assert plain.splitlines()[0].startswith("task:")
    verbose = cli("show", "a", "--verbose").out
    assert "identity:" in verbose and "dir_ino" in verbose
    assert "health:       ok" in plain


def test_ls_shows_lane_activity(repo: Path, cli) -> None:
    assert cli("new", "a", "--no-start").code == 0
    agent = exec_agent("a", repo)
    try:
        agent.expect(r"^ready ")
        line = next(x for x in cli("ls").out.splitlines() if x.startswith("a "))
        assert "running `" in line and "agent.py" in line
    finally:
        agent.send("exit 0")
        assert agent.wait() == 0
        agent.close()
    line = next(x for x in cli("ls").out.splitlines() if x.startswith("a "))
    assert line.endswith("idle")


def test_a_task_is_named_by_a_unique_prefix_of_its_id(repo: Path, cli) -> None:
    assert cli("new", "a", "--no-start").code == 0
    task_id = json.loads(cli("show", "a", "--json").out)["id"]
    assert json.loads(cli("show", task_id[:6], "--json").out)["name"] == "a"
    assert cli("show", task_id[:3]).code == 1  # too short to be an id prefix


def test_version(repo: Path, cli) -> None:
    result = cli("--version")
    assert (result.code, result.out) == (0, f"laneboard {__version__}\n")
