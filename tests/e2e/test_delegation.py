"""Delegation without agents: children spawned from a parent's commit, the tree, the limits,
cancelling before any agent started, retrying a failed setup, and doctor after a crash. Real
git, real laneboard processes where a process must be held or killed."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import doc, git
from tests.procs import Spawned


def config(lines: str) -> None:
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(lines)


def running(pid: int) -> bool:
    """The process lives and is not a zombie (one killed whose parent died may wait for a
    reaper that a container does not have)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def branches(repo: Path) -> set[str]:
    return set(git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").split())


def cancel_while_held(cli, repo: Path, held: Any) -> tuple[Spawned, Spawned, Any]:  # type: ignore[no-untyped-def]
    """`new c --parent p` held at `held`'s point, and a `cancel c` that has asked (its request
    is in the journal) and now waits for the provisioning process to stop."""
    spawning = Spawned(["new", "c", "--parent", "p", "--no-start"], repo, held.env)
    held.reached()
    cancelling = Spawned(["cancel", "c"], repo)
    end = time.monotonic() + 90
    while "cancel.requested" not in cli("log", "c").out:
        assert time.monotonic() < end, "the cancel never asked"
        time.sleep(0.05)  # the journal is the only sign the cancel has asked
    return spawning, cancelling, held


@pytest.fixture
def parent(repo: Path, cli) -> dict[str, Any]:
    """A parent task with one commit of its own."""
    made = doc(cli("new", "p", "--no-start", "--json"))
    work = Path(made["worktree_path"])
    (work / "plan.md").write_text("the plan\n")
    git(work, "add", "plan.md")
    git(work, "commit", "-q", "-m", "plan")
    return doc(cli("show", "p", "--json"))


def test_a_child_starts_at_the_parents_commit_without_its_uncommitted_files(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    work = Path(parent["worktree_path"])
    head = git(work, "rev-parse", "HEAD")
    (work / "README.md").write_text("edited, not committed\n")
    (work / "scratch.txt").write_text("untracked\n")
    made = cli("new", "c", "--parent", "p", "--no-start", "--json")
    child = doc(made)
    assert child["base_sha"] == head and child["parent_id"] == parent["id"]
    assert child["target"] == parent["branch"]
    assert "README.md" in made.err and "scratch.txt" in made.err and head[:12] in made.err
    assert any("scratch.txt" in note for note in child["notes"])
    inside = Path(child["worktree_path"])
    assert git(inside, "rev-parse", "HEAD") == head
    assert (inside / "plan.md").read_text() == "the plan\n"
    assert (inside / "README.md").read_text() == "hello\n"
    assert not (inside / "scratch.txt").exists()
    assert (work / "README.md").read_text() == "edited, not committed\n"  # parent untouched
    # The tree: `ls --children`, the indented `ls`, `show`'s parent and children lines.
    listed = doc(cli("ls", "--children", "p", "--json"))
    assert [t["name"] for t in listed["tasks"]] == ["c"]
    table = cli("ls").out.splitlines()
    assert [row.split()[0] for row in table[1:]] == ["p", "└─"]
    assert "└─ c" in table[2]
    assert "parent:" in cli("show", "c").out and "c (provisioned)" in cli("show", "p").out


def test_the_pane_of_a_task_is_its_childrens_parent_unless_told_otherwise(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    env = {"LANEBOARD_TASK": parent["id"]}
    child = doc(cli("new", "c", "--no-start", "--json", env=env))
    assert child["parent_id"] == parent["id"]
    top = doc(cli("new", "t", "--no-parent", "--no-start", "--json", env=env))
    assert top["parent_id"] is None
    both = cli("new", "x", "--parent", "p", "--no-parent", "--no-start")
    assert both.code == 2 and "not both" in both.err


def test_max_children_and_max_depth_refuse_before_anything_is_made(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    config("[delegation]\nmax_children = 2\nmax_depth = 2\n")
    assert cli("new", "a", "--parent", "p", "--no-start").code == 0
    assert cli("new", "b", "--parent", "p", "--no-start").code == 0
    before = branches(repo)
    third = cli("new", "c", "--parent", "p", "--no-start")
    assert third.code == 1 and "max_children" in third.err and len(third.err.splitlines()) == 1
    assert branches(repo) == before and not (repo / ".worktrees" / "c").exists()
    assert cli("new", "a1", "--parent", "a", "--no-start").code == 0  # depth 2
    deep = cli("new", "a2", "--parent", "a1", "--no-start")
    assert deep.code == 1 and "max_depth" in deep.err
    assert branches(repo) == before | {"lb/a1/work"}
    # A child that retired frees its place.
    assert cli("cancel", "b").code == 0
    assert cli("new", "c", "--parent", "p", "--no-start").code == 0
    bad = cli("new", "z", "--parent", "nobody", "--no-start")
    assert bad.code == 1 and "nobody" in bad.err and "Traceback" not in bad.err
    empty = cli("new", "z", "--parent", "p", "--cmd", "")
    assert empty.code == 2 and "empty command" in empty.err


def test_cancel_before_any_agent_removes_exactly_what_the_child_created(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    git(repo, "branch", "lb/unrelated/work")
    (repo / ".worktrees" / "keep-me").mkdir(parents=True)
    child = doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    inside = Path(child["worktree_path"])
    (inside / "notes.md").write_text("someone wrote here\n")
    from laneboard.core.service.app import Service

    assert Service().cancel_removes(Service().resolve(repo, "c")) is True
    done = doc(cli("cancel", "c", "--json"))
    assert done["state"] == "cancelled" and done["disposition"] == "cancelled"
    assert not inside.exists() and "lb/c/work" not in branches(repo)
    assert {"lb/unrelated/work", "lb/p/work", "main"} <= branches(repo)
    assert (repo / ".worktrees" / "keep-me").is_dir()
    assert Path(parent["worktree_path"], "plan.md").exists()
    kinds = [e["kind"] for e in doc(cli("log", child["id"], "--json"))["events"]]
    assert kinds.index("cancel.intent") < kinds.index("task.cancelled")
    assert "snapshot.created" in kinds  # the file someone wrote was saved first
    restored = doc(cli("restore", child["id"], "--as", "back", "--json"))
    assert Path(restored["worktree_path"], "notes.md").read_text() == "someone wrote here\n"
    again = doc(cli("cancel", child["id"], "--json"))
    assert again["state"] == "cancelled"  # nothing more to do, said so


def test_cancel_refuses_while_a_process_works_in_the_worktree(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    import subprocess

    child = doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    inside = Path(child["worktree_path"])
    sleeper = subprocess.Popen(["sleep", "60"], cwd=inside)
    try:
        refused = cli("cancel", "c")
        assert refused.code == 1 and "process inside" in refused.err
        assert inside.is_dir() and doc(cli("show", "c", "--json"))["state"] == "provisioned"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_cancel_during_setup_stops_it_and_rolls_the_child_back(
    repo: Path, cli, parent: dict[str, Any], shared: Path
) -> None:
    marker = shared / "setup-began"  # the setup runs confined: it sees the test's home
    config(f'[provision]\nsetup = "touch {marker}; exec sleep 60"\n')
    spawning = Spawned(["new", "c", "--parent", "p", "--no-start"], repo)
    try:
        end = time.monotonic() + 30
        while not marker.exists() and spawning.proc.poll() is None and time.monotonic() < end:
            time.sleep(0.05)  # the setup's own file is the event; nothing else says it began
        assert marker.exists(), "the setup never started"
        done = doc(cli("cancel", "c", "--json"))
        assert done["state"] == "cancelled"
        assert spawning.wait() == 1
        assert "cancelled" in spawning.proc.stderr.read().decode()  # type: ignore[union-attr]
    finally:
        spawning.close()
    assert not (repo / ".worktrees" / "c").exists() and "lb/c/work" not in branches(repo)
    kinds = [e["kind"] for e in doc(cli("log", done["id"], "--json"))["events"]]
    assert "setup.started" in kinds and "cancel.requested" in kinds


def test_a_cancel_interrupted_after_its_intent_is_finished_by_doctor(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    child = doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    killed = cli("cancel", "c", env={"LANEBOARD_FAULT": "cancel.after_intent"})
    assert killed.code != 0
    assert doc(cli("show", "c", "--json"))["state"] == "cancelling"
    started = cli("start", "c", "--cmd", "true")
    assert started.code == 1  # no agent is handed a worktree that is being removed
    report = cli("doctor", "--json")
    assert report.code == 1
    assert [f["kind"] for f in json.loads(report.out)["findings"]] == ["interrupted-cancel"]
    fixed = doc(cli("doctor", "--fix", "--json"))["findings"][0]
    assert fixed["fixed"] == "marked cancelled"
    assert not Path(child["worktree_path"]).exists() and "lb/c/work" not in branches(repo)


def test_a_child_killed_mid_setup_and_then_cancelled_is_undone_not_finished(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    killed = cli(
        "new", "c", "--parent", "p", "--no-start", env={"LANEBOARD_FAULT": "provision.after_copy"}
    )
    assert killed.code != 0
    assert doc(cli("show", "c", "--json"))["state"] == "provisioning"
    done = doc(cli("cancel", "c", "--json"))  # its owner is dead: the cancel undoes it
    assert done["state"] == "cancelled"
    assert not (repo / ".worktrees" / "c").exists() and "lb/c/work" not in branches(repo)


def test_after_a_crash_doctor_undoes_a_provisioning_that_was_being_cancelled(
    repo: Path, cli, parent: dict[str, Any], pause
) -> None:
    spawning, cancelling, _held = cancel_while_held(cli, repo, pause("provision.after_copy"))
    try:
        cancelling.kill_group()  # the power goes: both die, the cancel asked
        spawning.kill_group()
        spawning.wait()
    finally:
        spawning.close()
        cancelling.close()
    fixed = doc(cli("doctor", "--fix", "--json"))["findings"]
    assert [(f["kind"], f["fixed"]) for f in fixed] == [
        ("interrupted-provisioning", "marked cancelled")
    ]
    assert not (repo / ".worktrees" / "c").exists() and "lb/c/work" not in branches(repo)


def test_retry_provisions_a_failed_setup_again_from_the_same_commit(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    config('[provision]\nsetup = "echo broken >&2; exit 3"\n')
    failed = cli("new", "c", "--parent", "p", "--no-start")
    assert failed.code == 1 and "exited with 3" in failed.err
    first = doc(cli("show", "c", "--json"))
    assert first["state"] == "failed"
    # The parent moves on meanwhile: the retry still starts where the first try was pinned.
    work = Path(parent["worktree_path"])
    (work / "later.md").write_text("later\n")
    git(work, "add", "later.md")
    git(work, "commit", "-q", "-m", "later")
    config('[provision]\nsetup = "true"\n')
    again = doc(cli("retry", "c", "--json"))
    assert again["id"] != first["id"] and again["state"] == "provisioned"
    assert again["base_sha"] == first["base_sha"] and again["parent_id"] == parent["id"]
    assert again["target"] == first["target"]
    old = doc(cli("log", first["id"], "--json"))
    assert "setup.failed" in [e["kind"] for e in old["events"]]  # the first try's record stays
    assert cli("retry", "c").code == 1  # a provisioned task is not retried


def test_a_reviewed_child_is_finalized_into_its_parents_branch_and_checkout(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    child = doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    inside, work = Path(child["worktree_path"]), Path(parent["worktree_path"])
    (inside / "part.txt").write_text("the child's part\n")
    git(inside, "add", "part.txt")
    git(inside, "commit", "-q", "-m", "part")
    tip = git(inside, "rev-parse", "HEAD")
    assert cli("review", "c", "--mark").code == 0
    (work / "plan.md").write_text("the parent is editing this\n")
    dirty = cli("finalize", "c", "--merge")
    assert dirty.code == 1 and "uncommitted changes (plan.md)" in dirty.err
    assert git(repo, "rev-parse", "lb/p/work") == git(work, "rev-parse", "HEAD^{commit}")
    assert git(repo, "log", "-1", "--format=%s", "lb/p/work") == "plan"  # nothing moved
    assert (work / "plan.md").read_text() == "the parent is editing this\n"
    git(work, "checkout", "--", "plan.md")
    done = doc(cli("finalize", "c", "--merge", "--json"))
    assert done["state"] == "finalized" and done["target"] == "lb/p/work"
    head = git(work, "rev-parse", "HEAD")
    assert head == git(repo, "rev-parse", "lb/p/work") == done["target_new"]
    assert git(repo, "merge-base", "--is-ancestor", tip, head) == ""
    assert (work / "part.txt").read_text() == "the child's part\n"  # the parent's checkout has it
    assert git(work, "status", "--porcelain") == ""


def test_a_parent_whose_worktree_was_swapped_neither_spawns_nor_takes_a_merge(
    repo: Path, cli, parent: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    child = doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    inside = Path(child["worktree_path"])
    (inside / "part.txt").write_text("part\n")
    git(inside, "add", "part.txt")
    git(inside, "commit", "-q", "-m", "part")
    assert cli("review", "c", "--mark").code == 0
    work = Path(parent["worktree_path"])
    os.rename(work, tmp_path / "moved-away")
    shutil.copytree(tmp_path / "moved-away", work, symlinks=True)  # same files, another dir
    before = branches(repo)
    spawned = cli("new", "d", "--parent", "p", "--no-start")
    assert spawned.code == 1 and "fails verification" in spawned.err
    assert branches(repo) == before
    tip = git(repo, "rev-parse", "lb/p/work")
    merged = cli("finalize", "c", "--merge")
    assert merged.code == 1 and "checked out in the worktree" in merged.err
    assert git(repo, "rev-parse", "lb/p/work") == tip


def test_a_retired_childs_record_never_shows_a_later_task_on_its_branch_name(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    first = doc(cli("new", "kid", "--parent", "p", "--no-start", "--json"))
    assert doc(cli("cancel", "kid", "--json"))["state"] == "cancelled"
    again = doc(cli("retry", "kid", "--no-start", "--json"))
    work = Path(again["worktree_path"])
    (work / "n.txt").write_text("second try\n")
    git(work, "add", "n.txt")
    git(work, "commit", "-q", "-m", "second try")
    old = doc(cli("wait", first["id"], "--json"))["completions"][0]
    assert old["id"] == first["id"] and old["branch_sha"] is None
    assert old["ahead"] == 0 and old["files"] == []
    new = cli("wait", again["id"], "--timeout", "0")
    assert new.code == 75 and "kid (provisioned)" in new.err  # no agent yet: not done


def test_a_record_follows_the_worktrees_head_even_when_detached(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    child = doc(cli("new", "det", "--parent", "p", "--no-start", "--json"))
    work = Path(child["worktree_path"])
    git(work, "checkout", "-q", "--detach")
    (work / "d.txt").write_text("on a detached head\n")
    git(work, "add", "d.txt")
    git(work, "commit", "-q", "-m", "detached work")
    record = doc(cli("show", "det", "--json"))["completion"]
    assert record["head_sha"] == git(work, "rev-parse", "HEAD") and record["detached"] is True
    assert record["branch_sha"] == child["base_sha"]
    assert record["ahead"] == 1 and [f["path"] for f in record["files"]] == ["d.txt"]


def test_a_restored_child_is_its_parents_child_again(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    child = doc(cli("new", "rs", "--parent", "p", "--no-start", "--json"))
    Path(child["worktree_path"], "kept.txt").write_text("kept\n")
    assert doc(cli("cancel", "rs", "--json"))["state"] == "cancelled"
    back = doc(cli("restore", "rs", "--json"))
    assert back["parent_id"] == parent["id"]
    assert [t["name"] for t in doc(cli("ls", "--children", "p", "--json"))["tasks"]] == ["rs"]


@pytest.mark.parametrize("how", ["interrupted", "killed"])
def test_a_cancel_stopped_before_it_was_answered_is_withdrawn_or_finished_by_doctor(
    repo: Path, cli, parent: dict[str, Any], pause, how: str
) -> None:
    """Provisioning has looked for a cancel for the last time; the cancel asks, then stops:
    Ctrl-C takes the request back (the task may get its agent), a kill leaves it for doctor,
    which finishes the cancel instead of leaving a task no agent may ever be given."""
    import signal

    spawning, cancelling, held = cancel_while_held(cli, repo, pause("provision.before_settle"))
    try:
        if how == "interrupted":
            cancelling.signal(signal.SIGINT)
            assert cancelling.wait() == 130
        else:
            cancelling.kill_group()
            cancelling.wait()
        held.go()
        assert spawning.wait() == 0
    finally:
        spawning.close()
        cancelling.close()
    assert doc(cli("show", "c", "--json"))["state"] == "provisioned"
    report = cli("doctor", "--json")
    if how == "interrupted":
        assert report.code == 0 and json.loads(report.out)["findings"] == []
        return
    assert [f["kind"] for f in json.loads(report.out)["findings"]] == ["interrupted-cancel"]
    fixed = doc(cli("doctor", "--fix", "--json"))["findings"]
    assert fixed[0]["fixed"] == "marked cancelled"
    assert not (repo / ".worktrees" / "c").exists() and "lb/c/work" not in branches(repo)


def test_cancelling_a_child_whose_provisioning_died_mid_setup_stops_what_setup_left(
    repo: Path, cli, parent: dict[str, Any], tmp_path: Path
) -> None:
    import signal

    pidfile = tmp_path / "setup.pid"
    # Unconfined: a confined setup dies with the provisioning that runs it (its sandbox's
    # `--die-with-parent`), leaving nothing to stop.
    config(
        '[confine]\nmode = "off"\n'
        f'[provision]\nsetup = "echo built > built.txt; echo $$ > {pidfile}; exec sleep 60"\n'
    )
    spawning = Spawned(["new", "c", "--parent", "p", "--no-start"], repo)
    try:
        end = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < end:
            time.sleep(0.05)
        os.kill(spawning.pid, signal.SIGKILL)  # the provisioning process only: setup lives on
        spawning.wait()
    finally:
        spawning.close()
    orphan = int(pidfile.read_text())
    assert running(orphan)  # still running, holding the task's lane
    done = cli("cancel", "c", "--json")
    assert doc(done)["state"] == "cancelled" and "kept" not in done.err
    assert not running(orphan)
    assert not (repo / ".worktrees" / "c").exists() and "lb/c/work" not in branches(repo)


@pytest.mark.parametrize(
    "added, in_the_way",
    [("notes.log", "notes.log"), ("build/out.txt", "build"), ("link/x", "link")],
    ids=["the-same-path", "a-file-where-a-directory-goes", "a-link-where-a-directory-goes"],
)
def test_finalizing_into_a_checkout_never_writes_over_its_ignored_files(
    repo: Path, cli, added: str, in_the_way: str, tmp_path: Path
) -> None:
    (repo / ".gitignore").write_text("*.log\nbuild\nlink\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-q", "-m", "ignore logs and build")
    parent = doc(cli("new", "p", "--no-start", "--json"))
    child = doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    inside, work = Path(child["worktree_path"]), Path(parent["worktree_path"])
    (inside / added).parent.mkdir(parents=True, exist_ok=True)
    (inside / added).write_text("the child's\n")
    git(inside, "add", "-f", added)
    git(inside, "commit", "-q", "-m", "an ignored path, forced")
    assert cli("review", "c", "--mark").code == 0
    if in_the_way == "link":
        (tmp_path / "elsewhere").mkdir()
        (work / "link").symlink_to(tmp_path / "elsewhere")
    else:
        (work / in_the_way).write_text("PRECIOUS\n")  # ignored there: git would replace it
    tip = git(repo, "rev-parse", "lb/p/work")
    refused = cli("finalize", "c", "--merge")
    assert refused.code == 1 and in_the_way in refused.err and "overwritten" in refused.err
    if in_the_way == "link":
        assert (work / "link").is_symlink()
    else:
        assert (work / in_the_way).read_text() == "PRECIOUS\n"
    assert git(repo, "rev-parse", "lb/p/work") == tip
    assert doc(cli("show", "c", "--json"))["state"] == "ready_for_review"


def test_grandchildren_under_a_retired_child_are_still_below_their_grandparent(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    doc(cli("new", "c", "--parent", "p", "--no-start", "--json"))
    doc(cli("new", "g", "--parent", "c", "--no-start", "--json"))
    assert doc(cli("cancel", "c", "--json"))["state"] == "cancelled"  # g is kept
    below = doc(cli("ls", "--children", "p", "--json"))["tasks"]
    assert [t["name"] for t in below] == ["g"]
    done = cli("cancel", "p", "--children", "cancel", "--json")
    assert doc(done)["state"] == "cancelled" and "g: cancelled" in done.err
    assert not (repo / ".worktrees" / "g").exists()


def test_a_child_killed_before_its_pin_is_cancelled_cleanly_and_spawns_nothing(
    repo: Path, cli, parent: dict[str, Any]
) -> None:
    fault = {"LANEBOARD_FAULT": "provision.after_worktree_add"}
    assert cli("new", "x", "--parent", "p", "--no-start", env=fault).code != 0
    refused = cli("new", "g", "--parent", "x", "--no-start")
    assert refused.code == 1 and "settled" in refused.err
    done = cli("cancel", "x", "--json")
    assert doc(done)["state"] == "cancelled" and "internal error" not in done.err
    assert not (repo / ".worktrees" / "x").exists() and "lb/x/work" not in branches(repo)


def test_an_mcp_server_in_a_worktree_that_fails_verification_refuses_to_start(
    repo: Path, cli, parent: dict[str, Any], tmp_path: Path
) -> None:
    import shutil

    work = Path(parent["worktree_path"])
    os.rename(work, tmp_path / "moved-away")
    shutil.copytree(tmp_path / "moved-away", work, symlinks=True)
    started = cli("mcp", cwd=work)
    assert started.code == 1 and "fails verification" in started.err


def test_mcp_config_snippets_name_this_laneboard_and_parse(repo: Path, cli) -> None:
    import sys
    import tomllib

    codex = cli("mcp", "--config", "codex")
    table = tomllib.loads(codex.out)["mcp_servers"]["laneboard"]
    assert table["command"] == sys.executable and table["args"] == ["-m", "laneboard", "mcp"]
    assert table["env"] == {"LANEBOARD_HOME": os.environ["LANEBOARD_HOME"]}
    gemini = cli("mcp", "--config", "gemini").out
    assert (
        json.loads(gemini.split("\n", 1)[1])["mcpServers"]["laneboard"]["command"] == sys.executable
    )
    claude = cli("mcp", "--config", "claude").out
    assert claude.startswith("claude mcp add --scope user -e LANEBOARD_HOME=")
    bad = cli("mcp", "--config", "vim")
    assert bad.code == 1 and "one of claude, codex, gemini" in bad.err
