"""The conflict radar flags only what the tasks' own work does (issue 20, item 1): each task's
changes past its merge base with the target. A conflict a task has with its target is shown
once, against the target; a pair of tasks is flagged only when their own work cannot be merged
together; a task with no work of its own is never flagged. Real git, through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import git

LINES = [f"line {i}\n" for i in range(20)]


def _write(where: Path, path: str, lines: list[str], message: str) -> None:
    (where / path).write_text("".join(lines))
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", message)


def _edited(**changed: str) -> list[str]:
    """LINES with `line N` replaced (keys `l0`, `l10`, ...)."""
    lines = list(LINES)
    for key, text in changed.items():
        lines[int(key[1:])] = f"{text}\n"
    return lines


def _task(cli, repo: Path, name: str, **changed: str) -> Path:  # type: ignore[no-untyped-def]
    assert cli("new", name, "--no-start").code == 0
    work = repo / ".worktrees" / name
    if changed:
        _write(work, "f.txt", _edited(**changed), f"{name} edits f.txt")
    return work


def _flagged(cli) -> set[tuple[str, str | None]]:  # type: ignore[no-untyped-def]
    found = cli("conflicts", "--json")
    assert found.code == 0, found.err
    overlaps = json.loads(found.out)["repos"][0]["overlaps"]
    return {(o["task"], o["other"]) for o in overlaps if not o["clean"]}


def _base(repo: Path) -> None:
    _write(repo, "f.txt", LINES, "f.txt to edit")


def test_a_task_on_the_targets_tip_is_not_flagged_with_one_that_conflicts_with_the_target(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    """Regression (issue 20): y, created on main's tip with no commits, was reported as
    `x <-> y: conflict in f.txt` because y's history holds main's change that x conflicts with."""
    _base(repo)
    _task(cli, repo, "x", l0="x was here")
    _write(repo, "f.txt", _edited(l0="main was here"), "main edits f.txt")
    _task(cli, repo, "y")

    assert _flagged(cli) == {("x", None)}
    lines = [line.strip() for line in cli("conflicts").out.splitlines() if "<->" in line]
    assert lines == ["x <-> target main: conflict in f.txt"]


def test_a_task_with_work_of_its_own_is_not_blamed_for_the_targets_change(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """y's own commit edits a far line of f.txt; its history holds main's change that x
    conflicts with. Only x <-> main is flagged."""
    _base(repo)
    _task(cli, repo, "x", l0="x was here")
    _write(repo, "f.txt", _edited(l0="main was here"), "main edits f.txt")
    y = _task(cli, repo, "y")
    _write(y, "f.txt", _edited(l0="main was here", l19="y was here"), "y edits the end")

    assert _flagged(cli) == {("x", None)}


def test_a_task_whose_commits_are_already_in_the_target_is_not_flagged(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    _base(repo)
    _task(cli, repo, "x", l0="x was here")
    done = _task(cli, repo, "done", l0="done was here")
    git(repo, "merge", "-q", "--ff-only", git(done, "rev-parse", "HEAD"))

    assert _flagged(cli) == {("x", None)}


def test_two_tasks_that_each_conflict_with_main_but_not_each_other_are_not_a_pair(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    _base(repo)
    _task(cli, repo, "a", l0="a was here")
    _task(cli, repo, "b", l10="b was here")
    _write(repo, "f.txt", _edited(l0="main 0", l10="main 10"), "main edits both lines")

    assert _flagged(cli) == {("a", None), ("b", None)}


def test_two_tasks_that_truly_conflict_are_flagged_as_a_pair(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """They edit the same line; main moved elsewhere (another file) in between, so b's base is
    newer than a's: still their own work, and still a conflict."""
    _base(repo)
    _task(cli, repo, "a", l5="a's line five")
    _write(repo, "other.txt", ["main\n"], "main adds a file")
    _task(cli, repo, "b", l5="b's line five")

    assert _flagged(cli) == {("a", "b")}
    assert "a <-> b: conflict in f.txt" in cli("conflicts").out


def test_two_tasks_that_conflict_with_each_other_and_with_main_are_flagged_as_a_pair(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    _base(repo)
    _task(cli, repo, "a", l5="a's line five")
    _task(cli, repo, "b", l5="b's line five")
    _write(repo, "f.txt", _edited(l5="main's line five"), "main edits line five")

    assert _flagged(cli) == {("a", None), ("b", None), ("a", "b")}
