"""A task whose branch another live task targets (its child, or a task stacked on it with
`--target`) keeps that branch: discard and finalize refuse, naming them; a cancel that removes
the parent keeps its children and moves their target to the parent's own, journalled (issue
27, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import doc, git


def _work(repo: Path, name: str) -> None:
    worktree = repo / ".worktrees" / name
    (worktree / f"{name}.txt").write_text(f"{name}\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", f"{name} work")


def test_a_parent_with_a_live_child_is_neither_discarded_nor_finalized(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    doc(cli("new", "p", "--no-start", "--json"))
    _work(repo, "p")
    doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    tip = git(repo, "rev-parse", "lb/p/work")
    for words in (["discard", "p"], ["discard", "p", "--force"]):
        refused = cli(*words)
        assert refused.code == 1 and "live task targets its branch: c" in refused.err, refused.err
    assert cli("review", "p", "--mark").code == 0
    refused = cli("finalize", "p", "--merge")
    assert refused.code == 1 and "c (provisioned) target its branch" in refused.err, refused.err
    assert git(repo, "rev-parse", "lb/p/work") == tip
    assert (repo / ".worktrees" / "p").is_dir()
    # Once the child is gone, the parent goes its way.
    assert cli("discard", "c").code == 0
    assert cli("finalize", "p", "--merge").code == 0


def test_a_task_stacked_on_a_branch_keeps_it_too(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    doc(cli("new", "base", "--no-start", "--json"))
    doc(cli("new", "top", "--no-start", "--target", "lb/base/work", "--json"))
    for words in (["discard", "base", "--force"], ["cancel", "base"]):
        refused = cli(*words)
        assert refused.code == 1 and "top" in refused.err, refused.err
    assert git(repo, "rev-parse", "--verify", "-q", "lb/base/work")


def test_cancelling_a_parent_moves_its_kept_children_onto_its_target(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    doc(cli("new", "p", "--no-start", "--json"))
    doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    done = cli("cancel", "p", "--json")
    assert doc(done)["state"] == "cancelled", done.err
    assert "c now targets main" in done.err, done.err
    child = doc(cli("show", "c", "--json"))
    assert child["target"] == "main"
    journal = cli("log", "c", "--json")
    assert any(e["kind"] == "task.retargeted" for e in json.loads(journal.out)["events"])
    _work(repo, "c")
    assert cli("review", "c", "--mark").code == 0
    assert cli("finalize", "c", "--merge").code == 0
    assert (repo / "c.txt").read_text() == "c\n"  # landed on main, checked out in the root
