"""The review loop with the Claude stand-in on a real tmux server, the controller running:
each turn that changes the worktree makes a checkpoint (a turn that changes nothing makes
none); rewind restores the files byte for byte and is itself undone by a second rewind; a file
made after the last checkpoint survives a rewind; comments reach the agent as one prompt with
their lines and turn outdated when the line changes; review shows only what changed since the
last review, also after a rebase."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import doc, git
from tests.e2e.test_finalize import commit
from tests.e2e.test_runtime import eventually, screen
from tests.fakes.claude import MARKER
from tests.procs import Spawned


@pytest.fixture
def controller(repo: Path, agents, server) -> Iterator[Spawned]:  # type: ignore[no-untyped-def]
    """`laneboard supervise` running beside the test, as the board would be."""
    running = Spawned(["supervise", "--interval", "0.2"], repo)
    yield running
    running.proc.terminate()
    running.wait()
    running.close()


def checkpoints(cli, name: str) -> list[dict]:  # type: ignore[no-untyped-def]
    done = cli("checkpoints", name, "--json")
    assert done.code == 0, done.err
    return list(json.loads(done.out)["checkpoints"])


def events(cli, name: str, kind: str) -> list[dict]:  # type: ignore[no-untyped-def]
    return [e for e in json.loads(cli("log", name, "--json").out)["events"] if e["kind"] == kind]


def turn(cli, server, name: str, line: str) -> None:  # type: ignore[no-untyped-def]
    """Send `line` to the agent and wait until the controller has looked at the turn's end
    (a checkpoint, or the note that nothing changed)."""
    seen = len(events(cli, name, "checkpoint.created")) + len(
        events(cli, name, "checkpoint.unchanged")
    )
    assert cli("send", name, line).code == 0
    eventually(
        lambda: (
            len(events(cli, name, "checkpoint.created"))
            + len(events(cli, name, "checkpoint.unchanged"))
            > seen
        ),
        f"the controller saw the turn {line!r}",
    )


def files(worktree: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(worktree)): p.read_bytes()
        for p in sorted(worktree.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


def test_a_checkpoint_per_turn_and_rewind_restores_and_is_undone(
    repo: Path, cli, server, controller
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    worktree = repo / ".worktrees" / "t"
    turn(cli, server, "t", "write a.txt one")
    turn(cli, server, "t", "write b.txt two")
    turn(cli, server, "t", "just a question")  # changes nothing: no checkpoint
    turn(cli, server, "t", "write c.txt three")
    made = checkpoints(cli, "t")
    assert [c["n"] for c in made] == [1, 2, 3], made
    assert events(cli, "t", "checkpoint.unchanged"), "the unchanged turn was looked at"
    at_three = files(worktree)

    (worktree / "late.txt").write_bytes(b"made after the last checkpoint \xff\n")
    back = cli("rewind", "t", "1")
    assert back.code == 0, back.err
    assert files(worktree) == {"README.md": b"hello\n", "a.txt": b"one\n"}
    assert git(worktree, "status", "--porcelain", "--untracked-files=all") == "?? a.txt"
    left = checkpoints(cli, "t")[-1]["n"]
    assert left == 4 and f"rewind t {left}" in back.out  # the state it left, saved first

    undone = cli("rewind", "t", str(left))
    assert undone.code == 0, undone.err
    assert files(worktree) == {**at_three, "late.txt": b"made after the last checkpoint \xff\n"}


def test_a_rewind_waits_for_the_turn_to_end(repo: Path, cli, server, controller) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    turn(cli, server, "t", "write a.txt one")
    turn(cli, server, "t", "write a.txt two")
    assert cli("send", "t", "work 30").code == 0
    eventually(lambda: "esc to interrupt" in screen(server, cli, "t"), "the agent works")
    refused = cli("rewind", "t", "1")
    assert refused.code == 1 and "its agent is working" in refused.err
    assert (repo / ".worktrees" / "t" / "a.txt").read_text() == "two\n"


def test_a_rewind_can_fork_the_conversation_and_the_old_one_is_kept(
    repo: Path, cli, server, controller
) -> None:  # type: ignore[no-untyped-def]
    """`rewind --fork`: the files go back, and Claude goes on in a new conversation that
    starts as a copy of its own (`--resume OLD --fork-session --session-id NEW`); the old
    conversation is left as it was, and the controller never takes it back for the new."""
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    turn(cli, server, "t", "write a.txt one")
    turn(cli, server, "t", "write b.txt two")
    old = doc(cli("show", "t", "--json"))["conversation_id"]
    logs = Path(os.environ["HOME"]) / ".fake-claude"
    before = (logs / f"{old}.log").read_text()

    back = cli("rewind", "t", "1", "--fork")
    assert back.code == 0, back.err
    assert files(repo / ".worktrees" / "t") == {"README.md": b"hello\n", "a.txt": b"one\n"}
    new = doc(cli("show", "t", "--json"))["conversation_id"]
    assert new != old
    assert [e["data"]["forked_from"] for e in events(cli, "t", "agent.forked")] == [old]
    eventually(lambda: "resumed conversation with 2 turns" in screen(server, cli, "t"), "forked")
    turn(cli, server, "t", "after the fork")
    assert (logs / f"{new}.log").read_text() == before + "after the fork\n"
    assert (logs / f"{old}.log").read_text() == before  # the old conversation, as it was
    assert doc(cli("show", "t", "--json"))["conversation_id"] == new  # after the controller


def test_a_rewind_with_fork_by_an_agent_that_cannot_changes_nothing(
    repo: Path, cli, server, controller, agents
) -> None:  # type: ignore[no-untyped-def]
    agents(profile_lines="fork = []")
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    turn(cli, server, "t", "write a.txt one")
    turn(cli, server, "t", "write a.txt two")
    made = checkpoints(cli, "t")
    refused = cli("rewind", "t", "1", "--fork")
    assert refused.code == 1 and "cannot fork its conversation" in refused.err
    assert (repo / ".worktrees" / "t" / "a.txt").read_text() == "two\n"
    assert checkpoints(cli, "t") == made and not events(cli, "t", "rewind.intent")


def test_comments_reach_the_agent_as_one_prompt_and_go_outdated(
    repo: Path, cli, server, controller
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    worktree = repo / ".worktrees" / "t"
    turn(cli, server, "t", "write a.txt line one\\nline two\\nline three")
    commit(worktree, "a.txt", (worktree / "a.txt").read_text(), "the agent's work")
    assert cli("review", "t", "--mark").code == 0
    made = cli("review", "t", "--comment", "a.txt:2", "say two, not line two")
    assert made.code == 0, made.err
    bad = cli("review", "t", "--comment", "a.txt:9", "no such line")
    assert bad.code == 1 and "has no line 9" in bad.err
    listed = json.loads(cli("review", "t", "--comments", "--json").out)["comments"]
    assert [(c["path"], c["line"], c["outdated"]) for c in listed] == [("a.txt", 2, False)]

    sent = cli("review", "t", "--send")
    assert sent.code == 0, sent.err
    eventually(lambda: "a.txt:2: say two, not line two" in screen(server, cli, "t"), "the prompt")
    shown = screen(server, cli, "t")
    assert ">     2 | line two" in shown and "1 | line one" in shown  # the lines around it

    turn(cli, server, "t", "write a.txt line one\\nTWO\\nline three")
    listed = json.loads(cli("review", "t", "--comments", "--json").out)["comments"]
    assert [(c["state"], c["outdated"]) for c in listed] == [("sent", True)]
    assert cli("review", "t", "--resolve", str(listed[0]["id"])).code == 0
    assert json.loads(cli("review", "t", "--comments", "--json").out)["comments"] == []


def test_review_shows_what_changed_since_the_last_review_also_after_a_rebase(
    repo: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t", "--no-start").code == 0
    worktree = repo / ".worktrees" / "t"
    commit(worktree, "one.txt", "1\n", "first turn")
    commit(worktree, "two.txt", "2\n", "second turn")
    assert cli("review", "t", "--mark").code == 0
    commit(worktree, "three.txt", "3\n", "third turn")
    since = json.loads(cli("review", "t", "--json").out)["since"]
    assert since["kind"] == "interdiff"
    assert [c["subject"] for c in since["commits"]] == ["third turn"]
    assert [f["path"] for f in since["files"]] == ["three.txt"]
    text = cli("review", "t")
    assert "since your review" in text.out and "two.txt" not in text.out
    assert "two.txt" in cli("review", "t", "--full").out  # the whole work, one flag away

    assert cli("review", "t", "--mark").code == 0
    commit(repo, "main.txt", "main moved\n", "main moves on")
    assert cli("rebase", "t").code == 0
    commit(worktree, "four.txt", "4\n", "fourth turn")
    since = json.loads(cli("review", "t", "--json").out)["since"]
    assert since["kind"] == "range-diff"
    assert "fourth turn" in since["range_diff"]
    assert "third turn" not in since["range_diff"] and "first turn" not in since["range_diff"]


def test_a_rewind_never_overwrites_a_file_no_checkpoint_holds(
    repo: Path, cli, server, controller
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    worktree = repo / ".worktrees" / "t"
    turn(cli, server, "t", "write notes.txt a draft")
    turn(cli, server, "t", "write other.txt more")
    # Then notes.txt became ignored and holds something no checkpoint saved.
    (worktree / ".gitignore").write_text("notes.txt\n")
    (worktree / "notes.txt").write_text("a secret the agent keeps\n")
    refused = cli("rewind", "t", "1")
    assert refused.code == 1 and "notes.txt is in the worktree but in no checkpoint" in refused.err
    assert (worktree / "notes.txt").read_text() == "a secret the agent keeps\n"
    assert (worktree / "other.txt").read_text() == "more\n"


def test_the_bounds_drop_the_oldest_never_a_pinned_one(repo: Path, cli, server, controller) -> None:  # type: ignore[no-untyped-def]
    (repo / ".laneboard.toml").write_text("[checkpoints]\nkeep = 2\n")
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    turn(cli, server, "t", "write a.txt 1")
    assert cli("checkpoints", "t", "--pin", "1").code == 0
    turn(cli, server, "t", "write a.txt 2")
    turn(cli, server, "t", "write a.txt 3")
    # the oldest goes right after the new one is journalled: wait for it, not for the clock
    eventually(
        lambda: [(c["n"], c["pinned"]) for c in checkpoints(cli, "t")] == [(1, True), (3, False)],
        "checkpoint 2 dropped",
    )
    kept = checkpoints(cli, "t")
    refs = git(repo, "for-each-ref", "--format=%(refname)", "refs/laneboard/checkpoints/")
    assert refs.splitlines() == [c["ref"] for c in kept]
    assert [e["data"]["n"] for e in events(cli, "t", "checkpoint.dropped")] == [2]


def test_a_rewind_refuses_a_worktree_with_files_git_status_does_not_look_at(
    repo: Path, cli, server, controller
) -> None:  # type: ignore[no-untyped-def]
    assert cli("new", "t").code == 0
    eventually(lambda: MARKER in screen(server, cli, "t"), "the agent's prompt")
    worktree = repo / ".worktrees" / "t"
    turn(cli, server, "t", "write README.md v1")
    turn(cli, server, "t", "write README.md v2")
    git(worktree, "add", "README.md")
    git(worktree, "update-index", "--assume-unchanged", "README.md")
    (worktree / "README.md").write_text("changed where git status does not look\n")
    refused = cli("rewind", "t", "1")
    assert refused.code == 1 and "README.md is marked assume-unchanged" in refused.err
    assert (worktree / "README.md").read_text() == "changed where git status does not look\n"
