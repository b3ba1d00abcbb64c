"""The merge queue: reviewed tasks integrated in batches with one gate run on the top, bisected
when the gate fails; conflicting tasks never share a batch; a commit the user makes on the
target meanwhile is kept; a crash at each step is finished or undone by `doctor --fix`; the
target never points at a commit whose gate did not pass. Real git, a real gate script, real
processes where a crash or a pause is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git, is_ancestor
from tests.e2e.test_finalize import commit, no_scratch, ready, show
from tests.procs import started

GATE = "test ! -f broken.txt"
"""The gate: red exactly when the tree holds `broken.txt`."""


def queue_doc(cli, *args: str) -> dict:  # type: ignore[no-untyped-def]
    done = cli("queue", *args, "--json")
    assert done.code in (0, 1), done.err
    return json.loads(done.out)


def gated(repo: Path, cli, names: list[str]) -> set[str]:  # type: ignore[no-untyped-def]
    """Every SHA the gate passed on, from the tasks' journals."""
    found = set()
    for name in names:
        for event in json.loads(cli("log", name, "--json").out)["events"]:
            if event["kind"] == "gate.passed":
                found.add(event["data"]["sha"])
    return found


def positions_of_main(repo: Path, since: str) -> list[str]:
    """Every commit `main` pointed at after `since`, from its reflog (newest first)."""
    found = []
    for line in git(repo, "reflog", "show", "--format=%H", "refs/heads/main").splitlines():
        if line == since:
            break
        found.append(line)
    return found


def test_eight_tasks_one_breaks_the_gate_seven_land_the_culprit_is_found(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text(f"gate = '{GATE}'\n")
    names = [f"t{i}" for i in range(1, 9)]
    reviewed = {}
    for name in names:
        files = {f"{name}.txt": f"{name}\n"}
        if name == "t5":
            files["broken.txt"] = "breaks the gate\n"
        reviewed[name] = ready(cli, repo, name, files)
    old = git(repo, "rev-parse", "main")
    added = cli("queue", "add", *names)
    assert added.code == 0, added.err
    assert [e["task"] for e in queue_doc(cli, "ls")["entries"]] == names

    done = cli("queue", "run", "--json", process=True)
    report = json.loads(done.out)
    assert done.code == 1, done.err  # one went back to review
    assert sorted(report["landed"]) == sorted(n for n in names if n != "t5")
    assert [r["task"] for r in report["returned"]] == ["t5"]
    assert "the gate failed" in report["returned"][0]["reason"]
    assert report["gate_runs"] <= 1 + 2 * 3, report
    tip = git(repo, "rev-parse", "main")
    for name in names:
        assert is_ancestor(repo, reviewed[name], tip) == (name != "t5"), name
    culprit = show(cli, "t5")
    assert culprit["state"] == "ready_for_review"
    stopped = json.loads(cli("log", "t5", "--json").out)["events"]
    returned = next(e for e in stopped if e["kind"] == "queue.returned")
    assert Path(returned["data"]["log"]).exists()  # the gate's whole output, kept
    assert (
        "the gate failed with it in the batch: exited with 1"
        in next(e for e in stopped if e["kind"] == "finalize.stopped")["data"]["reason"]
    )
    # Every position main took was a commit the gate passed on; each landed task has its own
    # merge commit, the one before it its parent.
    passed = gated(repo, cli, names)
    moves = positions_of_main(repo, old)
    assert moves and all(sha in passed for sha in moves)
    for name in names:
        if name == "t5":
            continue
        task = show(cli, name)
        assert task["state"] == "finalized" and task["finalized_sha"] == reviewed[name]
        parents = git(repo, "rev-list", "--parents", "-n", "1", task["target_new"]).split()
        assert parents[1:] == [task["target_old"], reviewed[name]]
    no_scratch(repo)
    left = queue_doc(cli, "ls", "--all")["entries"]
    assert {e["task"]: e["state"] for e in left} == {
        **{n: "landed" for n in names if n != "t5"},
        "t5": "returned",
    }


def test_conflicting_tasks_never_share_a_batch(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    a = ready(cli, repo, "a", {"README.md": "hello\nfrom a\n"})
    ready(cli, repo, "b", {"README.md": "hello\nfrom b\n"})
    c = ready(cli, repo, "c", {"c.txt": "c\n"})
    assert cli("queue", "add", "a", "b", "c").code == 0
    report = json.loads(cli("queue", "run", "--json", process=True).out)
    assert sorted(report["landed"]) == ["a", "c"]
    # b waited for the next batch (it conflicts with a), then, alone on a target that holds a,
    # it conflicts with the target: back to review with the file named.
    assert [d["task"] for d in report["deferred"]] == ["b"]
    assert [r["task"] for r in report["returned"]] == ["b"]
    assert "README.md" in report["returned"][0]["reason"]
    tip = git(repo, "rev-parse", "main")
    assert is_ancestor(repo, a, tip) and is_ancestor(repo, c, tip)
    assert show(cli, "b")["state"] == "ready_for_review"
    # No gate ever ran on a tree holding both a's and b's change.
    for sha in gated(repo, cli, ["a", "b", "c"]):
        assert git(repo, "show", f"{sha}:README.md") != "hello\nfrom b"


def test_a_user_commit_on_the_target_mid_batch_is_kept(repo: Path, cli, pause) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("gate = 'true'\n")
    x = ready(cli, repo, "x", {"x.txt": "x\n"})
    y = ready(cli, repo, "y", {"y.txt": "y\n"})
    assert cli("queue", "add", "x", "y").code == 0
    held = pause("finalize.after_gate")
    proc = started(["queue", "run"], repo, held.env)
    held.reached()
    users = commit(repo, "user.txt", "the user's own commit\n", "the user commits meanwhile")
    held.go()
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    tip = git(repo, "rev-parse", "main")
    for kept in (users, x, y):
        assert is_ancestor(repo, kept, tip)
    assert (repo / "user.txt").read_text() == "the user's own commit\n"
    events = [e["kind"] for e in json.loads(cli("log", "x", "--json").out)["events"]]
    assert "finalize.target_moved" in events  # the batch was built again on the new tip
    no_scratch(repo)


QUEUE_POINTS = [
    "queue.after_intents",
    "queue.after_results",
    "finalize.after_scratch",
    "finalize.after_gate",
    "queue.after_bisect",
    "finalize.after_move",
    "queue.after_land",
]


@pytest.mark.parametrize("point", QUEUE_POINTS)
def test_a_crash_at_each_step_is_settled_by_doctor_fix_and_the_queue_goes_on(
    repo: Path, cli, point: str
) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text(f"gate = '{GATE}'\n")
    names = ["p", "q", "r"]
    reviewed = {n: ready(cli, repo, n, {f"{n}.txt": f"{n}\n"}) for n in names[:2]}
    reviewed["r"] = ready(cli, repo, "r", {"r.txt": "r\n", "broken.txt": "x\n"})
    old = git(repo, "rev-parse", "main")
    assert cli("queue", "add", *names).code == 0
    crashed = cli("queue", "run", env={"LANEBOARD_FAULT": point})  # a process: it is killed
    assert crashed.code == -9, crashed.err

    fixed = cli("doctor", "--fix", "--json")
    assert fixed.code in (0, 1), fixed.err
    kinds = {f["kind"] for f in json.loads(fixed.out)["findings"]}
    assert "interrupted-queue" in kinds, kinds
    no_scratch(repo)
    for name in names:
        state = show(cli, name)["state"]
        assert state in ("finalized", "ready_for_review"), (name, state)
        landed = is_ancestor(repo, reviewed[name], git(repo, "rev-parse", "main"))
        assert landed == (state == "finalized"), name
    again = cli("queue", "run", "--json", process=True)
    assert again.code in (0, 1), again.err
    assert show(cli, "r")["state"] == "ready_for_review"  # the culprit, this run or the first
    tip = git(repo, "rev-parse", "main")
    assert is_ancestor(repo, reviewed["p"], tip) and is_ancestor(repo, reviewed["q"], tip)
    assert not is_ancestor(repo, reviewed["r"], tip)
    passed = gated(repo, cli, names)
    assert all(sha in passed for sha in positions_of_main(repo, old))
    assert not [e for e in queue_doc(cli, "ls")["entries"] if e["state"] == "testing"]
    no_scratch(repo)


def test_pause_resume_and_cancel(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    ready(cli, repo, "m", {"m.txt": "m\n"})
    ready(cli, repo, "n", {"n.txt": "n\n"})
    assert cli("queue", "add", "m").code == 0
    paused = cli("queue", "pause")
    assert paused.code == 0 and "paused" in paused.out
    idle = json.loads(cli("queue", "run", "--json", process=True).out)
    assert idle["landed"] == [] and idle["paused"] == ["main"]
    assert show(cli, "m")["state"] == "provisioned"  # untouched: it waits in line
    assert cli("queue", "resume").code == 0
    assert json.loads(cli("queue", "run", "--json", process=True).out)["landed"] == ["m"]
    assert cli("queue", "add", "n").code == 0
    cancelled = cli("queue", "cancel")
    assert cancelled.code == 0 and "n" in cancelled.out
    assert queue_doc(cli, "ls")["entries"] == []
    assert show(cli, "n")["state"] == "provisioned"


def test_what_cannot_wait_in_line_is_refused_and_nothing_changes(repo: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "raw", "--no-start").code == 0
    not_reviewed = cli("queue", "add", "raw")
    assert not_reviewed.code == 1 and "has not been reviewed" in not_reviewed.err
    ready(cli, repo, "ok", {"ok.txt": "ok\n"})
    ready(cli, repo, "moved", {"moved.txt": "1\n"})
    commit(repo / ".worktrees" / "moved", "moved.txt", "2\n", "after review")
    both = cli("queue", "add", "ok", "moved")
    assert both.code == 1 and "moved since review" in both.err
    assert queue_doc(cli, "ls")["entries"] == []  # `ok` was not added either
    assert cli("queue", "add", "ok").code == 0
    twice = cli("queue", "add", "ok")
    assert twice.code == 1 and "in the merge queue already" in twice.err
    for bad, said in (
        (("queue", "frobnicate"), "the actions are"),
        (("queue", "run", "ok"), "takes no names"),
        (("queue", "add"), "needs task names"),
    ):
        result = cli(*bad)
        assert result.code == 2 and said in result.err and "Traceback" not in result.err
    assert [e["task"] for e in queue_doc(cli, "ls")["entries"]] == ["ok"]


def test_with_tell_the_culprits_agent_is_resumed_and_told_why(
    repo: Path, cli, agents, server
) -> None:  # type: ignore[no-untyped-def]
    from tests.e2e.test_runtime import eventually, screen

    (repo / ".laneboard.toml").write_text(f"gate = '{GATE}'\n")
    assert cli("new", "t", "--prompt", "first").code == 0
    eventually(lambda: "done: first" in screen(server, cli, "t"), "the first turn")
    commit(repo / ".worktrees" / "t", "broken.txt", "x\n", "the agent's work")
    assert cli("pause", "t").code == 0
    assert cli("review", "t", "--mark").code == 0
    assert cli("queue", "add", "t", "--tell").code == 0
    done = cli("queue", "run", process=True)
    assert done.code == 1 and "t: back to review" in done.out, done.err
    assert "t: its agent was resumed and told why" in done.err
    eventually(
        lambda: "merge queue sent this task back to review" in screen(server, cli, "t"),
        "the agent was told",
    )
    assert show(cli, "t")["state"] == "running"  # its agent works on it again
