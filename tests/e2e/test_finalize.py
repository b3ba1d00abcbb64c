"""Finalize by local merge: exactly the reviewed SHA lands, by each strategy; every refusal
changes nothing; the target moves only by compare-and-swap; the root is fast-forwarded only
when clean; a crash at each step is finished or undone by `doctor --fix` with no scratch
worktree left behind. Real git, real processes where a kill or a pause is needed."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import git, is_ancestor
from tests.procs import started


def commit(worktree: Path, path: str, content: str, message: str) -> str:
    (worktree / path).parent.mkdir(parents=True, exist_ok=True)
    (worktree / path).write_text(content)
    git(worktree, "add", "--", path)
    git(worktree, "commit", "-q", "-m", message)
    return git(worktree, "rev-parse", "HEAD")


def show(cli, name: str) -> dict:  # type: ignore[no-untyped-def]
    found = cli("show", name, "--json")
    assert found.code == 0, found.err
    return json.loads(found.out)


def ready(cli, repo: Path, name: str, files: dict[str, str]) -> str:  # type: ignore[no-untyped-def]
    """A task `name` with one commit writing `files`, marked reviewed; its reviewed SHA."""
    assert cli("new", name, "--no-start").code == 0
    worktree = repo / ".worktrees" / name
    for path, content in files.items():
        (worktree / path).parent.mkdir(parents=True, exist_ok=True)
        (worktree / path).write_text(content)
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", f"{name} work")
    marked = cli("review", name, "--mark")
    assert marked.code == 0, marked.err
    return git(worktree, "rev-parse", "HEAD")


def refs_and_files(repo: Path) -> tuple[str, dict[str, bytes], str]:
    """Every ref, every file of the root checkout (not .git) and the root's status."""
    files = {}
    for directory, dirs, names in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in (".git", ".worktrees")]
        for name in names:
            path = Path(directory) / name
            files[str(path.relative_to(repo))] = path.read_bytes()
    return (
        git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"),
        files,
        git(repo, "status", "--porcelain=v2", "--untracked-files=all"),
    )


def no_scratch(repo: Path) -> None:
    area = repo / ".worktrees"
    assert not [p for p in area.iterdir() if p.name.startswith(".integrating-")]
    assert ".integrating-" not in git(repo, "worktree", "list", "--porcelain")


# --- strategies -------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["merge", "squash", "rebase"])
def test_each_strategy_lands_exactly_the_reviewed_content(repo: Path, cli, strategy: str) -> None:  # type: ignore[no-untyped-def]
    reviewed = ready(cli, repo, "feat", {"src/feat.txt": "feature\n", "README.md": "hello\nfeat\n"})
    other = commit(repo, "other.txt", "from main\n", "main moves on")
    expected = git(repo, "merge-tree", "--write-tree", other, reviewed).splitlines()[0]

    done = cli("finalize", "feat", "--merge", "--strategy", strategy)
    assert done.code == 0, done.err
    tip = git(repo, "rev-parse", "main")
    assert git(repo, "rev-parse", f"{tip}^{{tree}}") == expected
    assert git(repo, "status", "--porcelain") == ""  # the clean root was fast-forwarded
    assert git(repo, "rev-parse", "HEAD") == tip
    parents = git(repo, "rev-list", "--parents", "-n1", tip).split()[1:]
    if strategy == "merge":
        assert parents == [other, reviewed]
    elif strategy == "squash":
        assert parents == [other]
        assert not is_ancestor(repo, reviewed, tip)
    else:
        assert is_ancestor(repo, other, tip) and not is_ancestor(repo, reviewed, tip)
        assert git(repo, "log", "-1", "--format=%an %s", tip) == "Test Operator feat work"
    task = show(cli, "feat")
    assert (task["state"], task["finalized_sha"]) == ("finalized", reviewed)
    assert (task["target_old"], task["target_new"]) == (other, tip)
    assert git(repo, "rev-parse", f"refs/laneboard/finalized/{task['id']}") == reviewed
    assert task["retired_at"] is not None  # worktree and branch went by the cleanup policy
    assert not (repo / ".worktrees" / "feat").exists()
    assert git(repo, "branch", "--list", "lb/feat/work") == ""
    no_scratch(repo)


def test_a_merge_commit_keeps_the_reviewed_sha_an_ancestor_even_when_it_could_fast_forward(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    reviewed = ready(cli, repo, "ff", {"a.txt": "a\n"})
    old = git(repo, "rev-parse", "main")
    assert cli("finalize", "ff", "--merge").code == 0
    tip = git(repo, "rev-parse", "main")
    assert git(repo, "rev-list", "--parents", "-n1", tip).split()[1:] == [old, reviewed]
    message = git(repo, "log", "-1", "--format=%B", tip)
    assert "Merge lb/ff/work into main" in message and reviewed in message


def test_commits_laneboard_makes_carry_the_users_identity(repo: Path, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "who", {"a.txt": "a\n"})
    assert cli("finalize", "who", "--merge").code == 0
    assert git(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>") == (
        "Test Operator <operator@example.invalid>|Test Operator <operator@example.invalid>"
    )


def test_no_git_identity_is_refused_before_anything_changes(
    repo: Path, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "anon", {"a.txt": "a\n"})
    bare = tmp_path / "no-identity.gitconfig"
    bare.write_text("[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(bare))
    monkeypatch.setenv("EMAIL", "")
    before = refs_and_files(repo)
    refused = cli("finalize", "anon", "--merge")
    assert refused.code == 1
    assert "no git identity" in refused.err and "user.email" in refused.err
    assert refs_and_files(repo) == before
    assert show(cli, "anon")["state"] == "provisioned"


# --- refusals that change nothing -------------------------------------------------------------


def test_unreviewed_task_is_refused(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "raw", "--no-start").code == 0
    commit(repo / ".worktrees" / "raw", "a.txt", "a\n", "work")
    refused = cli("finalize", "raw", "--merge")
    assert refused.code == 1 and "has not been reviewed" in refused.err


def test_branch_moved_after_review_is_refused_naming_both_shas(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    reviewed = ready(cli, repo, "moved", {"a.txt": "a\n"})
    later = commit(repo / ".worktrees" / "moved", "b.txt", "b\n", "after review")
    before = refs_and_files(repo)
    refused = cli("finalize", "moved", "--merge")
    assert refused.code == 1
    assert reviewed in refused.err and later in refused.err and "moved since review" in refused.err
    assert refs_and_files(repo) == before


@pytest.mark.parametrize("kind", ["modified", "staged", "untracked"])
def test_uncommitted_work_is_refused_until_committed(repo: Path, cli, kind: str) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "dirty", {"a.txt": "a\n"})
    worktree = repo / ".worktrees" / "dirty"
    if kind == "untracked":
        (worktree / "new.txt").write_text("not committed\n")
    else:
        (worktree / "a.txt").write_text("changed\n")
        if kind == "staged":
            git(worktree, "add", "a.txt")
    before = refs_and_files(repo)
    refused = cli("finalize", "dirty", "--merge")
    assert refused.code == 1 and "uncommitted changes" in refused.err
    assert refs_and_files(repo) == before


def test_review_mark_warns_about_uncommitted_changes(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "warn", "--no-start").code == 0
    worktree = repo / ".worktrees" / "warn"
    tip = commit(worktree, "a.txt", "a\n", "work")
    (worktree / "loose.txt").write_text("x\n")
    marked = cli("review", "warn", "--mark")
    assert marked.code == 0 and "warning: 1 uncommitted" in marked.err
    assert show(cli, "warn")["reviewed_sha"] == tip


def test_dirty_root_with_the_target_checked_out_is_refused(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "t", {"a.txt": "a\n"})
    (repo / "README.md").write_text("the user's edit\n")
    before = refs_and_files(repo)
    refused = cli("finalize", "t", "--merge")
    assert refused.code == 1
    assert "uncommitted changes (README.md)" in refused.err and "never stashes" in refused.err
    assert refs_and_files(repo) == before


def test_untracked_files_the_fast_forward_would_overwrite_stop_it_untouched(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "t", {"new.txt": "from the task\n"})
    (repo / "new.txt").write_text("the user's own file\n")
    before = refs_and_files(repo)
    refused = cli("finalize", "t", "--merge")
    assert refused.code == 1 and "fast-forwarded" in refused.err
    assert refs_and_files(repo) == before
    assert (repo / "new.txt").read_text() == "the user's own file\n"
    assert show(cli, "t")["state"] == "ready_for_review"
    no_scratch(repo)


def test_target_checked_out_in_another_worktree_is_refused_naming_it(
    repo: Path, cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    git(repo, "branch", "release")
    elsewhere = tmp_path / "release-checkout"
    git(repo, "worktree", "add", "-q", str(elsewhere), "release")
    ready(cli, repo, "t", {"a.txt": "a\n"})
    before = refs_and_files(repo)
    refused = cli("finalize", "t", "--merge", "--into", "release")
    assert refused.code == 1 and str(elsewhere) in refused.err
    assert refs_and_files(repo) == before


def test_target_not_checked_out_moves_by_ref_and_leaves_the_root_alone(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    git(repo, "branch", "release")
    reviewed = ready(cli, repo, "t", {"a.txt": "a\n"})
    (repo / "README.md").write_text("the user's edit on main\n")
    done = cli("finalize", "t", "--merge", "--into", "release")
    assert done.code == 0, done.err
    assert is_ancestor(repo, reviewed, "release")
    assert (repo / "README.md").read_text() == "the user's edit on main\n"
    assert not (repo / "a.txt").exists()


def test_a_conflict_leaves_target_and_root_byte_identical(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "clash", {"README.md": "the task's line\n"})
    commit(repo, "README.md", "main's line\n", "main edits README")
    before = refs_and_files(repo)
    objects = git(repo, "count-objects", "-v")
    refused = cli("finalize", "clash", "--merge")
    assert refused.code == 1 and "conflicts with main in README.md" in refused.err
    assert refs_and_files(repo) == before
    assert show(cli, "clash")["state"] == "ready_for_review"
    events = json.loads(cli("log", "clash", "--json").out)["events"]
    stopped = [e for e in events if e["kind"] == "finalize.stopped"]
    assert stopped and stopped[-1]["data"]["files"] == ["README.md"]
    assert objects  # merge-tree may write objects; nothing else
    no_scratch(repo)


# --- the gate ---------------------------------------------------------------------------------


def test_gate_runs_on_the_result_in_a_scratch_worktree_and_a_failure_changes_nothing(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text(
        "gate = 'test -f feature.txt && test -f main.txt && echo checked $(pwd) && exit 4'\n"
    )
    ready(cli, repo, "g", {"feature.txt": "f\n"})
    commit(repo, "main.txt", "m\n", "main moves")
    before = refs_and_files(repo)
    refused = cli("finalize", "g", "--merge")
    assert refused.code == 1 and "gate command exited with 4" in refused.err
    assert refs_and_files(repo) == before
    events = json.loads(cli("log", "g", "--json").out)["events"]
    failed = next(e for e in events if e["kind"] == "gate.failed")["data"]
    assert failed["exit_code"] == 4
    assert ".worktrees/.integrating-" in failed["output"]  # it ran on the merged result there
    no_scratch(repo)

    (repo / ".laneboard.toml").write_text("gate = 'test -f feature.txt && test -f main.txt'\n")
    assert cli("finalize", "g", "--merge").code == 0
    assert (repo / "feature.txt").exists()
    no_scratch(repo)


def test_target_moved_during_the_gate_is_caught_and_recomputed_once(repo: Path, cli, pause) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    reviewed = ready(cli, repo, "race", {"feature.txt": "f\n"})
    held = pause("finalize.after_gate")
    proc = started(["finalize", "race", "--merge"], repo, held.env)
    held.reached()
    users = commit(repo, "user.txt", "the user's commit\n", "user commits meanwhile")
    held.go()
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    tip = git(repo, "rev-parse", "main")
    assert is_ancestor(repo, users, tip) and is_ancestor(repo, reviewed, tip)
    events = [e["kind"] for e in json.loads(cli("log", "race", "--json").out)["events"]]
    assert events.count("finalize.result") == 2 and "finalize.target_moved" in events
    assert events.count("gate.passed") == 2  # the new result was gated too


def test_a_target_moved_back_during_the_gate_is_not_fast_forwarded_over(
    repo: Path, cli, pause
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    dropped = commit(repo, "dropped.txt", "the user will drop this\n", "to be dropped")
    reviewed = ready(cli, repo, "back", {"feature.txt": "f\n"})
    held = pause("finalize.after_gate")
    proc = started(["finalize", "back", "--merge"], repo, held.env)
    held.reached()
    git(repo, "reset", "-q", "--hard", "HEAD~1")  # the user takes their commit back
    held.go()
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    tip = git(repo, "rev-parse", "main")
    assert is_ancestor(repo, reviewed, tip)
    # The task was based on the dropped commit, so it comes back with the task's merge, but
    # only as the result of a new computation on the tip the user left, never by a
    # fast-forward over it.
    events = [e["kind"] for e in json.loads(cli("log", "back", "--json").out)["events"]]
    assert "finalize.target_moved" in events and events.count("finalize.result") == 2
    assert is_ancestor(repo, dropped, tip)


def test_a_target_that_keeps_moving_is_never_overwritten(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    git(repo, "branch", "release")
    # The gate moves the target each time it runs: both attempts must lose the race. (A gate
    # that can, unconfined: a confined gate writes no ref, as test_confine_attacks shows.)
    (repo / ".laneboard.toml").write_text(
        'gate = \'git -C "$LANEBOARD_ROOT" update-ref refs/heads/release '
        '$(git -C "$LANEBOARD_ROOT" commit-tree -p release -m other release^{tree})\'\n'
        '[confine]\nmode = "off"\n'
    )
    ready(cli, repo, "t", {"a.txt": "a\n"})
    refused = cli("finalize", "t", "--merge", "--into", "release")
    assert refused.code == 1 and "moved twice" in refused.err
    tip = git(repo, "rev-parse", "release")
    assert git(repo, "log", "-1", "--format=%s", tip) == "other"  # the other writer's, kept
    assert git(repo, "rev-list", "--count", "release") == "3"
    assert show(cli, "t")["state"] == "ready_for_review"
    no_scratch(repo)


# --- serialization ------------------------------------------------------------------------------


def test_two_finalizes_are_serialized_while_a_task_lane_runs_beside_the_gate(
    repo: Path, cli, shared: Path
) -> None:  # type: ignore[no-untyped-def]
    tmp_path = shared  # the gate runs confined: it sees the test's home, not its /tmp
    gates = tmp_path / "gates"
    gates.mkdir()
    for name in ("a", "b"):
        os.mkfifo(gates / name)
    log = tmp_path / "gate.log"
    (repo / ".laneboard.toml").write_text(
        f"gate = 'echo start $LANEBOARD_TASK >> {log}; cat {gates}/$LANEBOARD_TASK; "
        f"echo end $LANEBOARD_TASK >> {log}'\n"
    )
    ready(cli, repo, "a", {"a.txt": "a\n"})
    ready(cli, repo, "b", {"b.txt": "b\n"})
    assert cli("new", "c", "--no-start").code == 0

    first = started(["finalize", "a", "--merge"], repo, {})
    wait_for(lambda: log.exists() and "start a" in log.read_text())
    second = started(["finalize", "b", "--merge"], repo, {})
    wait_for(lambda: _waiting_integrations(cli) == 1)
    # A task's lane is free while the gate runs: a lane command gets in at once.
    lane = cli("exec", "--lane", "c", "--timeout", "20", "--", "true")
    assert lane.code == 0, lane.err
    assert log.read_text() == "start a\n"
    with open(gates / "a", "w") as go:
        go.write("go\n")
    wait_for(lambda: "start b" in log.read_text())
    with open(gates / "b", "w") as go:
        go.write("go\n")
    for proc in (first, second):
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert log.read_text() == "start a\nend a\nstart b\nend b\n"
    merges = git(repo, "log", "--merges", "--format=%s", "main").splitlines()
    assert merges == ["Merge lb/b/work into main", "Merge lb/a/work into main"]


def _waiting_integrations(cli) -> int:  # type: ignore[no-untyped-def]
    lanes = json.loads(cli("lanes", "--json").out)
    return sum(
        1
        for repo in lanes["repos"]
        for lane in repo["lanes"]
        for lease in lane["waiting"]
        if lease["kind"] == "integrate"
    )


def wait_for(condition, deadline: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    import time

    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.05)


# --- --all-ready ------------------------------------------------------------------------------


def test_all_ready_integrates_in_review_order_and_stops_at_the_first_conflict(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    first = ready(cli, repo, "first", {"README.md": "first's line\n"})
    ready(cli, repo, "second", {"README.md": "second's line\n"})
    ready(cli, repo, "third", {"third.txt": "3\n"})
    done = cli("finalize", "--all-ready", "--merge")
    assert done.code == 1
    assert "first: finalized" in done.out
    assert "second: second conflicts with main in README.md" in done.err
    assert "not attempted: third" in done.err
    assert is_ancestor(repo, first, "main")
    assert show(cli, "third")["state"] == "provisioned"  # as it was
    assert show(cli, "third")["finalized_sha"] is None


# --- crash at each step -------------------------------------------------------------------------

FINALIZE_POINTS = [
    ("finalize.after_intent", "undone"),
    ("finalize.after_result", "undone"),
    ("finalize.after_scratch", "undone"),
    ("finalize.after_gate", "undone"),
    ("finalize.after_move", "finished"),
    ("finalize.after_anchor", "finished"),
]


@pytest.mark.parametrize(("point", "outcome"), FINALIZE_POINTS)
def test_crash_at_each_step_then_doctor_fix_finishes_or_undoes_exactly(
    repo: Path, cli, point: str, outcome: str
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    reviewed = ready(cli, repo, "c", {"c.txt": "c\n"})
    old = git(repo, "rev-parse", "main")
    crashed = cli("finalize", "c", "--merge", env={"LANEBOARD_FAULT": point})
    assert crashed.code == -9, crashed.err
    assert show(cli, "c")["state"] == "finalizing"
    report = json.loads(cli("doctor", "--json").out)["findings"]
    assert ("interrupted-finalize", "c") in {(f["kind"], f["task"]) for f in report}
    assert not [f for f in report if f["kind"] in ("unowned-worktree", "unregistered-dir")]

    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    said = [f["fixed"] for f in fixed if f["task"] == "c"]
    task = show(cli, "c")
    no_scratch(repo)
    if outcome == "finished":
        assert said == ["finished"]
        assert task["state"] == "finalized" and task["finalized_sha"] == reviewed
        assert git(repo, "rev-parse", "main") == task["target_new"] != old
        assert git(repo, "rev-parse", f"refs/laneboard/finalized/{task['id']}") == reviewed
        assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
        # Its worktree is still there (nothing removed it yet): a discard ends it, finalized.
        gone = cli("discard", "c")
        assert gone.code == 0, gone.err
        assert show(cli, "c")["state"] == "finalized"
    else:
        assert said == ["undone: back in review"]
        assert task["state"] == "ready_for_review"
        assert git(repo, "rev-parse", "main") == old
        assert cli("finalize", "c", "--merge").code == 0  # and it can be finalized again


def test_doctor_never_removes_a_scratch_worktree_that_is_not_the_one_it_made(
    repo: Path, cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    ready(cli, repo, "s", {"s.txt": "s\n"})
    crashed = cli("finalize", "s", "--merge", env={"LANEBOARD_FAULT": "finalize.after_scratch"})
    assert crashed.code == -9
    scratch = next(p for p in (repo / ".worktrees").iterdir() if p.name.startswith(".integ"))
    os.rename(scratch, tmp_path / "real-scratch")
    scratch.mkdir()
    (scratch / ".git").write_text((tmp_path / "real-scratch" / ".git").read_text())
    (scratch / "precious.txt").write_text("someone's file\n")
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    said = next(f["fixed"] for f in fixed if f["task"] == "s")
    assert said.startswith("not fixed:") and "left alone" in said
    assert (scratch / "precious.txt").read_text() == "someone's file\n"
    assert show(cli, "s")["state"] == "finalizing"


# --- rebase -------------------------------------------------------------------------------------


def test_rebase_replays_the_branch_onto_its_target_in_its_worktree(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "r", {"r.txt": "r\n"})
    main = commit(repo, "main.txt", "m\n", "main moves")
    done = cli("rebase", "r")
    assert done.code == 0, done.err
    worktree = repo / ".worktrees" / "r"
    assert git(worktree, "rev-parse", "HEAD~1") == main
    assert (worktree / "main.txt").exists()
    refused = cli("finalize", "r", "--merge")  # the branch moved: review it again
    assert refused.code == 1 and "moved since review" in refused.err


def test_a_rebase_conflict_is_left_in_place_for_the_operator(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "r", {"README.md": "the task's\n"})
    commit(repo, "README.md", "main's\n", "main edits")
    stopped = cli("rebase", "r")
    assert stopped.code == 1 and "conflicts in README.md" in stopped.err
    assert "git rebase --continue" in stopped.err
    worktree = repo / ".worktrees" / "r"
    assert "rebase in progress" in git(worktree, "status")
    assert "<<<<<<<" in (worktree / "README.md").read_text()


def test_gate_output_log_is_kept(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'echo gate-ran'\n")
    ready(cli, repo, "l", {"l.txt": "l\n"})
    assert cli("finalize", "l", "--merge").code == 0
    events = json.loads(cli("log", "l", "--json").out)["events"]
    passed = next(e for e in events if e["kind"] == "gate.passed")["data"]
    assert passed["exit_code"] == 0 and "gate-ran" in passed["output"]
    assert Path(passed["log"]).read_text() == "gate-ran\n"
    assert stat.S_ISREG(Path(passed["log"]).stat().st_mode)


def test_a_cleanup_blocker_keeps_the_worktree_of_a_finalized_task_until_discarded(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".gitignore").write_text("*.key\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore keys")
    reviewed = ready(cli, repo, "k", {"k.txt": "k\n"})
    worktree = repo / ".worktrees" / "k"
    (worktree / "prod.key").write_text("an ignored secret, not rebuildable\n")
    done = cli("finalize", "k", "--merge")
    assert done.code == 0, done.err
    assert "kept" in done.out and "prod.key" in done.out
    assert is_ancestor(repo, reviewed, "main")
    task = show(cli, "k")
    assert task["state"] == "finalized" and task["retired_at"] is None
    assert (worktree / "prod.key").exists()
    assert "finalized:" in cli("show", "k").out
    refused = cli("discard", "k")
    assert refused.code == 1 and "prod.key" in refused.err
    assert show(cli, "k")["state"] == "finalized"
    (worktree / "prod.key").unlink()  # the operator deals with the secret
    gone = cli("discard", "k")
    assert gone.code == 0, gone.err
    task = show(cli, "k")
    assert (task["state"], task["disposition"]) == ("finalized", "finalized")
    assert task["retired_at"] is not None and not worktree.exists()


# --- found by a hostile review ------------------------------------------------------------------


def _branch_with_a_merge(repo: Path, cli) -> str:  # type: ignore[no-untyped-def]
    """A reviewed task whose branch holds a merge commit that adds a file of its own."""
    assert cli("new", "m", "--no-start").code == 0
    w = repo / ".worktrees" / "m"
    commit(w, "a.txt", "a\n", "a")
    git(w, "checkout", "-q", "-b", "side", "HEAD~1")
    commit(w, "s.txt", "s\n", "s")
    git(w, "checkout", "-q", "lb/m/work")
    git(w, "merge", "-q", "--no-ff", "--no-commit", "side")
    (w / "in-the-merge.txt").write_text("only the merge commit adds this\n")
    git(w, "add", "in-the-merge.txt")
    git(w, "commit", "-q", "-m", "merge side")
    git(w, "branch", "-D", "-q", "side")
    assert cli("review", "m", "--mark").code == 0
    return git(w, "rev-parse", "HEAD")


def test_the_rebase_strategy_refuses_a_branch_with_merge_commits(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    _branch_with_a_merge(repo, cli)
    other = commit(repo, "main.txt", "m\n", "main moves")
    refused = cli("finalize", "m", "--merge", "--strategy", "rebase")
    assert refused.code == 1 and "holds 1 merge commit" in refused.err
    assert git(repo, "rev-parse", "main") == other
    done = cli("finalize", "m", "--merge")  # a merge commit keeps exactly what it holds
    assert done.code == 0, done.err
    assert (repo / "in-the-merge.txt").exists()


def test_rebase_refuses_merges_and_moves_no_other_branch_and_keeps_the_old_tip(
    repo: Path, cli, isolated_env: Path
) -> None:  # type: ignore[no-untyped-def]
    with open(isolated_env / ".gitconfig", "a") as config:
        config.write("[rebase]\n\tupdateRefs = true\n")
    _branch_with_a_merge(repo, cli)
    assert cli("new", "r", "--no-start").code == 0
    w = repo / ".worktrees" / "r"
    commit(w, "one.txt", "1\n", "one")
    git(w, "branch", "mybackup")
    old = commit(w, "two.txt", "2\n", "two")
    backup = git(repo, "rev-parse", "mybackup")
    commit(repo, "main.txt", "m\n", "main moves")
    refused = cli("rebase", "m")
    assert refused.code == 1 and "merge commit" in refused.err
    done = cli("rebase", "r")
    assert done.code == 0, done.err
    assert (w / "main.txt").exists() and (w / "two.txt").exists()
    assert git(repo, "rev-parse", "mybackup") == backup
    task_id = show(cli, "r")["id"]
    assert git(repo, "rev-parse", f"refs/laneboard/rebased/{task_id}/{old}") == old


def test_a_gate_that_deletes_its_scratch_worktree_leaves_nothing_behind(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'rm -rf \"$PWD\"; true'\n")
    ready(cli, repo, "g", {"g.txt": "g\n"})
    done = cli("finalize", "g", "--merge")
    assert done.code == 0, done.err
    no_scratch(repo)
    assert show(cli, "g")["state"] == "finalized"


def test_a_failing_gate_that_deletes_its_scratch_worktree_returns_the_task_to_review(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'rm -rf \"$PWD\"; exit 3'\n")
    ready(cli, repo, "g", {"g.txt": "g\n"})
    refused = cli("finalize", "g", "--merge")
    assert refused.code == 1 and "exited with 3" in refused.err
    assert show(cli, "g")["state"] == "ready_for_review"
    no_scratch(repo)
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    assert cli("finalize", "g", "--merge").code == 0


def test_what_a_gate_leaves_running_is_stopped_and_does_not_hold_the_lanes(
    repo: Path, cli, shared: Path
) -> None:  # type: ignore[no-untyped-def]
    began = shared / "stray.began"
    stray = "sleep 317"  # found again by its command line: pids inside a sandbox are its own
    (repo / ".laneboard.toml").write_text(f"gate = '{stray} & touch {began}; exit 0'\n")
    ready(cli, repo, "s", {"s.txt": "s\n"})
    done = cli("finalize", "s", "--merge")
    assert done.code == 0, done.err
    assert began.exists()
    assert show(cli, "s")["retired_at"] is not None  # the cleanup got its root lease
    running = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == b"sleep\x00317\x00":
                running.append(entry.name)
        except OSError:
            continue
    assert running == []
    assert cli("new", "next", "--no-start").code == 0  # and the root lane is free


def test_ctrl_c_during_a_gate_whose_tests_take_time_to_quit_returns_the_task_to_review(
    repo: Path, cli, shared: Path
) -> None:  # type: ignore[no-untyped-def]
    tmp_path = shared  # the gate runs confined: it sees the test's home, not its /tmp
    import signal
    import sys

    began = tmp_path / "began"
    gate = tmp_path / "gate.py"
    gate.write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), sys.exit(1)))\n"
        f"open({str(began)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    (repo / ".laneboard.toml").write_text(f"gate = ['{sys.executable}', '{gate}']\n")
    ready(cli, repo, "c", {"c.txt": "c\n"})
    proc = started(["finalize", "c", "--merge"], repo, {})
    wait_for(began.exists)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)  # generous: a loaded machine
    assert proc.returncode == 130, err
    assert show(cli, "c")["state"] == "ready_for_review"
    no_scratch(repo)


def test_a_symbolic_ref_target_is_refused(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "t", {"t.txt": "t\n"})
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    (repo / "README.md").write_text("dirty\n")
    before = refs_and_files(repo)
    refused = cli("finalize", "t", "--merge", "--into", "alias")
    assert refused.code == 1 and "symbolic ref to refs/heads/main" in refused.err
    assert refs_and_files(repo) == before


def test_a_ref_laneboard_moves_is_moved_itself_never_what_it_names(repo: Path) -> None:
    """Behind finalize's own refusal: a ref that turned symbolic between a look and the move
    (a confined parent owns its branch, which a child lands on) is replaced, not followed."""
    from laneboard.core.adapters.integrate import update_ref

    main = git(repo, "rev-parse", "main")
    git(repo, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    (repo / "new.txt").write_text("new\n")
    git(repo, "add", "new.txt")
    tree = git(repo, "write-tree")
    new = git(repo, "commit-tree", tree, "-p", main, "-m", "new")
    update_ref(repo, "refs/heads/alias", new, main, "test")
    assert git(repo, "rev-parse", "main") == main


def test_doctor_finishes_a_landed_finalize_after_the_target_moved_on(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    reviewed = ready(cli, repo, "l", {"l.txt": "l\n"})
    crashed = cli("finalize", "l", "--merge", env={"LANEBOARD_FAULT": "finalize.after_move"})
    assert crashed.code == -9
    commit(repo, "later.txt", "later\n", "the user commits on top")
    fixed = json.loads(cli("doctor", "--fix", "--json").out)["findings"]
    assert [f["fixed"] for f in fixed if f["task"] == "l"] == ["finished"]
    assert show(cli, "l")["state"] == "finalized"
    assert is_ancestor(repo, reviewed, "main")


def test_finalize_into_another_branch_says_which(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    git(repo, "branch", "rel")
    ready(cli, repo, "i", {"i.txt": "i\n"})
    done = cli("finalize", "i", "--merge", "--into", "rel")
    assert done.code == 0 and "into rel" in done.out
    empty = cli("finalize", "i", "--merge", "--into", "")
    assert empty.code == 2 and "--into needs a value" in empty.err


def test_all_ready_names_a_reviewed_task_whose_branch_moved(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "fine", {"f.txt": "f\n"})
    ready(cli, repo, "moved", {"m.txt": "m\n"})
    commit(repo / ".worktrees" / "moved", "more.txt", "more\n", "after review")
    done = cli("finalize", "--all-ready", "--merge")
    assert done.code == 0 and "fine: finalized" in done.out
    assert "skipped moved: its branch moved since review" in done.err


def test_marking_a_task_whose_branch_is_gone_is_refused(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "g", {"g.txt": "g\n"})
    git(repo / ".worktrees" / "g", "checkout", "-q", "--detach")
    git(repo, "branch", "-D", "-q", "lb/g/work")
    refused = cli("review", "g", "--mark")
    assert refused.code == 1 and "branch lb/g/work is gone" in refused.err


def test_integration_git_commands_finish_before_a_ctrl_c_takes_effect(
    repo: Path, tmp_path: Path
) -> None:
    import signal

    from laneboard.core.adapters.integrate import quiet_git

    done = tmp_path / "done"
    # The interrupt is sent by what git runs, so it surely comes while git runs (a timer in
    # this process raced git's start on a loaded machine).
    interrupt = f"kill -{int(signal.SIGINT)} {os.getpid()}"
    with pytest.raises(KeyboardInterrupt):
        quiet_git(["-c", f"alias.slow=!{interrupt} && sleep 1 && touch {done}", "slow"], repo)
    assert done.exists()  # git ran to its end; the interrupt came after it


def test_a_lease_whose_block_ended_is_kept_only_by_what_its_command_left_running(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    # In-process, as the board runs: the holder lives on after its block. The setup's
    # background `sleep` keeps the task's lane until it ends, then the discard's root lease
    # gets in; the living holder must not keep the lane forever.
    (repo / ".laneboard.toml").write_text("[provision]\nsetup = 'sleep 2 & exit 0'\n")
    assert cli("new", "a", "--no-start").code == 0
    gone = cli("discard", "a")
    assert gone.code == 0, gone.err
    assert show(cli, "a")["state"] == "discarded"
    kinds = [e["kind"] for e in json.loads(cli("log", "a", "--json").out)["events"]]
    # The setup's lease was released (its sleep over) before the discard's intent, not after.
    assert "lease.released" in kinds and "discard.intent" in kinds, kinds
    assert kinds.index("lease.released") < kinds.index("discard.intent"), kinds


def test_a_forged_registration_is_never_taken_for_the_scratch_worktree(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Was: task c wrote its own admin dir's `gitdir` and `locked` to look like e's scratch
    worktree, and e's finalize removed c's registration."""
    assert cli("new", "c", "--no-start").code == 0
    ready(cli, repo, "e", {"e.txt": "e\n"})
    e_id = show(cli, "e")["id"]
    admin = repo / ".git" / "worktrees" / "c"
    forge = (
        f"echo {repo}/.worktrees/.integrating-{e_id}/.git > {admin}/gitdir; "
        f"echo 'laneboard: integration of task {e_id}' > {admin}/locked"
    )
    # By hand: its own admin dir is writable to a task (confined or not).
    subprocess.run(["sh", "-c", forge], check=True)
    done = cli("finalize", "e", "--merge")
    assert done.code == 0, done.err
    assert admin.is_dir() and (admin / "HEAD").exists()
