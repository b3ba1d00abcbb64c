"""Delegation with agents in real tmux panes: a coordinator that fans out children from its own
pane, completion records that agree with git, checks flowing back, `wait`'s timeout and
`--any`, cancelling after an agent started, and the late cancel at the handoff, hit on purpose
on both sides (`agent.before_handoff`, `agent.after_handoff`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WORKER, doc, git
from tests.e2e.test_runtime import eventually
from tests.procs import Spawned

pytestmark = pytest.mark.tmux


def spawn(cli, name: str, steps: str, *extra: str) -> dict[str, Any]:
    return doc(cli("new", name, "--agent", "worker", "--prompt", steps, *extra, "--json"))


def test_a_coordinator_fans_out_three_children_from_its_pane_and_collects_their_records(
    repo: Path, cli, workers, server
) -> None:
    steps = " ;; ".join(
        [
            *(
                f"spawn c{i} write c{i}.txt from c{i} ; commit c{i} work ; check unit pass ; "
                f"say c{i} finished ; exit 0"
                for i in (1, 2, 3)
            ),
            "wait records.json c1 c2 c3",
            # What a parent may not do to its children from its confined pane (the operator's
            # alone), and what it may:
            "run marked.code review c1 --mark",
            "run merged.code finalize c1 --merge",
            "run dropped.code discard c2 --force",
            "run spawned.code new --no-start -- k5",
            "exit 0",
        ]
    )
    coordinator = spawn(cli, "coord", steps)
    # Confined, its pane cannot create worktrees: its `laneboard new` goes through its channel.
    assert coordinator["confined"] is True, coordinator["confine_note"]
    records = Path(coordinator["worktree_path"]) / "records.json"
    pane = coordinator["pane"]["pane_id"]
    eventually(
        lambda: Path(str(records) + ".code").exists(),
        "the coordinator's wait",
        on_fail=lambda: "\n".join(server.cmd("capture-pane", "-p", "-t", pane).stdout),
    )
    assert Path(str(records) + ".code").read_text() == "0", records.read_text()
    got = json.loads(records.read_text())
    assert [c["name"] for c in got["completions"]] == ["c1", "c2", "c3"] and not got["pending"]
    for record in got["completions"]:
        assert record["parent_id"] == coordinator["id"] and record["state"] == "ready_for_review"
        work = Path(record["worktree_path"])
        assert record["head_sha"] == git(work, "rev-parse", "HEAD")
        assert record["base_sha"] == coordinator["base_sha"]
        assert record["ahead"] == int(
            git(work, "rev-list", "--count", f"{record['base_sha']}..HEAD")
        )
        name = record["name"]
        assert record["files"] == [  # {record}

            {"path": f"{name}.txt", "status": "added", "old_path": None, "added": 1,
             "removed": 0, "binary": False}
        ]  # fmt: skip
        assert record["worktree"]["clean"] and record["exit_code"] == 0
        assert record["checks"][0]["name"] == "unit" and record["checks"][0]["result"] == "pass"
        assert record["message"] == f"{name} finished"
        assert record["target"] == "lb/coord/work" and record["pane"]["pane_id"].startswith("%")
        assert record["pane"]["socket"] == coordinator["pane"]["socket"]
    work = Path(coordinator["worktree_path"])
    eventually(lambda: (work / "spawned.code").exists(), "the coordinator's last step")
    codes = {
        n: (work / f"{n}.code").read_text() for n in ("marked", "merged", "dropped", "spawned")
    }
    assert codes == {"marked": "1", "merged": "1", "dropped": "1", "spawned": "0"}, codes
    # Nothing was reviewed, merged or discarded by the agent; its new child was made.
    assert git(repo, "rev-parse", "lb/coord/work") == coordinator["base_sha"]
    assert not (work / "c1.txt").exists()
    assert doc(cli("show", "c1", "--json"))["reviewed_sha"] is None
    assert doc(cli("show", "c2", "--json"))["state"] == "ready_for_review"
    assert doc(cli("show", "k5", "--json"))["parent_id"] == coordinator["id"]
    shown = doc(cli("show", "c3", "--json"))["completion"]
    assert shown["head_sha"] == got["completions"][2]["head_sha"]
    assert shown["checks"] == got["completions"][2]["checks"]
    tree = cli("ls").out
    assert all(f"├─ {n}" in tree or f"└─ {n}" in tree for n in ("c1", "c2", "c3", "k5")), tree


def test_wait_times_out_naming_who_is_at_work_and_any_returns_the_first(
    repo: Path, cli, workers, server
) -> None:
    doc(cli("new", "p", "--no-start", "--json"))
    spawn(cli, "slow", "sleep 60", "--parent", "p")
    spawn(cli, "quick", "check lint fail ;; exit 2", "--parent", "p")
    first = doc(cli("wait", "slow", "quick", "--any", "--json"))
    assert [c["name"] for c in first["completions"]] == ["quick"]
    assert [t["name"] for t in first["pending"]] == ["slow"]
    quick = first["completions"][0]
    assert quick["exit_code"] == 2 and quick["checks"][0]["result"] == "fail"
    timed = cli("wait", "slow", "--timeout", "0.5")
    assert timed.code == 75 and "slow (running)" in timed.err
    both = cli("wait", "slow", "quick", "quick", "--timeout", "0.5", "--json")
    assert both.code == 75  # it timed out, and still says what did finish, each once
    said = json.loads(both.out)
    assert [c["name"] for c in said["completions"]] == ["quick"]
    assert [t["name"] for t in said["pending"]] == ["slow"]
    elsewhere = cli("wait", "slow", env={"LANEBOARD_TMUX_SOCKET": "another-server"})
    assert elsewhere.code == 1 and "runs on the tmux server" in elsewhere.err


def test_cancel_after_the_agent_started_keeps_every_file(repo: Path, cli, workers, server) -> None:
    doc(cli("new", "p", "--no-start", "--json"))
    steps = "write work.txt mine ;; commit wip ;; write loose.txt uncommitted"
    # By --cmd: its first prompt is typed into it (the other way a prompt reaches an agent).
    child = doc(cli("new", "c", "--parent", "p", "--cmd", WORKER, "--prompt", steps, "--json"))
    work = Path(child["worktree_path"])
    eventually(lambda: (work / "loose.txt").exists(), "the child's work")
    tip = git(work, "rev-parse", "HEAD")
    done = doc(cli("cancel", "c", "--json"))
    assert done["state"] == "retained"
    assert (work / "work.txt").read_text() == "mine\n"
    assert (work / "loose.txt").read_text() == "uncommitted\n"
    assert git(repo, "rev-parse", "lb/c/work") == tip
    record = doc(cli("wait", "c", "--json"))["completions"][0]
    assert record["state"] == "retained" and record["worktree"]["untracked"] == ["loose.txt"]


@pytest.mark.parametrize("point", ["agent.before_handoff", "agent.after_handoff"])
def test_a_late_cancel_at_the_handoff_never_removes_what_the_agent_owns(
    repo: Path, cli, workers, server, pause, point: str
) -> None:
    doc(cli("new", "p", "--no-start", "--json"))
    held = pause(point)
    starting = Spawned(
        ["new", "c", "--parent", "p", "--agent", "worker", "--prompt", "write mine.txt agent"],
        repo,
        held.env,
    )
    cancelling: Spawned | None = None
    try:
        held.reached()  # the agent's pane is up; the start holds the agents lock
        cancelling = Spawned(["cancel", "c", "--json"], repo)
        time.sleep(0.3)
        assert cancelling.proc.poll() is None  # it waits for the start to decide
        held.go()
        code = starting.wait()
        said = starting.proc.stderr.read().decode()  # type: ignore[union-attr]
        assert code == 0 or "cancelled just after its agent started" in said, said
        assert cancelling.wait() == 0
        assert json.loads(cancelling.proc.stdout.read())["state"] == "retained"  # type: ignore[union-attr]
    finally:
        starting.close()
        if cancelling is not None:
            cancelling.close()
    work = repo / ".worktrees" / "c"
    assert work.is_dir() and "lb/c/work" in git(repo, "branch", "--list", "lb/c/work")


def test_a_start_that_finds_a_cancel_under_way_says_it_was_cancelled(
    repo: Path, cli, workers, server, pause
) -> None:
    """The cancel took the task between provisioning's end and the start's lock: the start
    says the task was cancelled (not "another process changed it") and starts nothing."""
    doc(cli("new", "p", "--no-start", "--json"))
    before_lock = pause("start.before_lock")
    starting = Spawned(
        ["new", "c", "--parent", "p", "--agent", "worker", "--prompt", "sleep 60"],
        repo,
        before_lock.env,
    )
    undoing = pause("cancel.after_intent")
    cancelling: Spawned | None = None
    try:
        before_lock.reached()
        cancelling = Spawned(["cancel", "c", "--json"], repo, undoing.env)
        undoing.reached()  # the cancel holds it: `cancelling`
        before_lock.go()
        assert starting.wait() == 1
        said = starting.proc.stderr.read().decode()  # type: ignore[union-attr]
        assert "c: cancelled before its agent started" in said, said
        undoing.go()
        assert cancelling.wait() == 0
        assert json.loads(cancelling.proc.stdout.read())["state"] == "cancelled"  # type: ignore[union-attr]
    finally:
        starting.close()
        if cancelling is not None:
            cancelling.close()


def test_a_cancel_asked_after_provisioning_last_looked_is_refused_by_the_start(
    repo: Path, cli, workers, server, pause
) -> None:
    """The other side of the handoff: provisioning has made its last check, the cancel asks,
    then provisioning settles; the start must not hand the worktree to an agent."""
    doc(cli("new", "p", "--no-start", "--json"))
    held = pause("provision.before_settle")
    starting = Spawned(
        ["new", "c", "--parent", "p", "--agent", "worker", "--prompt", "sleep 60"], repo, held.env
    )
    cancelling: Spawned | None = None
    try:
        held.reached()
        cancelling = Spawned(["cancel", "c", "--json"], repo)
        eventually(lambda: "cancel.requested" in cli("log", "c").out, "the cancel asked")
        held.go()
        assert starting.wait() == 1
        assert "cancelled" in starting.proc.stderr.read().decode()  # type: ignore[union-attr]
        assert cancelling.wait() == 0
        assert json.loads(cancelling.proc.stdout.read())["state"] == "cancelled"  # type: ignore[union-attr]
    finally:
        starting.close()
        if cancelling is not None:
            cancelling.close()
    assert not (repo / ".worktrees" / "c").exists()
    panes = server.cmd("list-panes", "-a", "-F", "#{window_name}").stdout
    assert "c" not in panes  # no agent was ever launched for it


@pytest.mark.parametrize("then", ["; exec sleep 60", ""], ids=["still-running", "exited"])
def test_a_start_killed_between_launch_and_record_counts_as_started(
    repo: Path, cli, workers, server, then: str
) -> None:
    """The ledger never heard of the agent; its pane, alive or dead, is the proof it ran."""
    doc(cli("new", "p", "--no-start", "--json"))
    command = f"sh -c 'echo agentwork > w.txt{then}'"
    killed = cli(
        "new", "c", "--parent", "p", "--cmd", command,
        env={"LANEBOARD_FAULT": "agent.before_handoff"},
    )  # fmt: skip
    assert killed.code != 0
    work = repo / ".worktrees" / "c"
    eventually(lambda: (work / "w.txt").exists(), "the agent's file")
    assert doc(cli("show", "c", "--json"))["state"] == "provisioned"  # the ledger never heard
    done = doc(cli("cancel", "c", "--json"))
    assert done["state"] == "retained"  # its pane was found and stopped, its files kept
    assert (work / "w.txt").read_text() == "agentwork\n"
    assert "lb/c/work" in git(repo, "branch", "--list", "lb/c/work")
    panes = server.cmd("list-panes", "-a", "-F", "#{pane_dead} #{@laneboard_task}").stdout
    assert not [line for line in panes if line.startswith("0 ") and done["id"] in line]


def test_a_task_queued_again_after_its_agent_ran_is_kept_by_cancel(
    repo: Path, cli, workers, server
) -> None:
    workers("max_running = 1")
    doc(cli("new", "p", "--no-start", "--json"))
    spawn(cli, "b", "write mine.txt agent ;; commit mine", "--parent", "p")
    work = repo / ".worktrees" / "b"
    # (Read as your own git would: in the instant between the agent's commit and its move
    # into the common store, git may not find the commit yet; docs/confine.md.)
    eventually(
        lambda: git(work, "log", "-1", "--format=%s", check=False) == "mine", "the agent's commit"
    )
    assert doc(cli("pause", "b", "--json"))["state"] == "paused"
    spawn(cli, "a", "sleep 60", "--parent", "p")  # takes the one slot
    assert doc(cli("resume", "b", "--json"))["state"] == "queued"
    from laneboard.core.service.app import Service

    queued = Service().resolve(repo, "b")
    assert Service().cancel_removes(queued) is False  # the board's dialog says "kept"
    done = doc(cli("cancel", "b", "--json"))
    assert done["state"] == "retained"
    assert (work / "mine.txt").read_text() == "agent\n" and git(
        repo, "log", "-1", "--format=%s", "lb/b/work"
    ) == "mine"


def test_wait_returns_for_a_child_whose_pane_is_gone(repo: Path, cli, workers, server) -> None:
    doc(cli("new", "p", "--no-start", "--json"))
    child = spawn(cli, "c", "sleep 60", "--parent", "p")
    server.cmd("kill-pane", "-t", child["pane"]["pane_id"])
    record = doc(cli("wait", "c", "--timeout", "20", "--json"))["completions"][0]
    assert record["state"] == "running" and record["lost"] is True and record["done"] is True


def test_cancelling_a_parent_keeps_its_children_unless_told(
    repo: Path, cli, workers, server
) -> None:
    doc(cli("new", "p", "--no-start", "--json"))
    spawn(cli, "c1", "sleep 60", "--parent", "p")
    doc(cli("new", "c2", "--parent", "p", "--no-start", "--json"))
    kept = cli("cancel", "p", "--json")
    assert doc(kept)["state"] == "cancelled" and "kept its 2 live descendants" in kept.err
    assert doc(cli("show", "c1", "--json"))["state"] == "running"
    doc(cli("new", "q", "--no-start", "--json"))
    spawn(cli, "d1", "sleep 60", "--parent", "q")
    doc(cli("new", "d2", "--parent", "q", "--no-start", "--json"))
    both = doc(cli("cancel", "q", "--children", "cancel", "--json"))
    assert both["state"] == "cancelled"
    assert doc(cli("show", "d1", "--json"))["state"] == "retained"
    assert doc(cli("show", "d2", "--json"))["state"] == "cancelled"
    assert (repo / ".worktrees" / "d1").is_dir() and not (repo / ".worktrees" / "d2").exists()
