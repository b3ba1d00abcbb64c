"""What the command line tells the operator (issue 20, items 4 and 8): a refused discard names
its fix, one agent is one blocker, and `ls` does not call a task whose agent exited `running`.
Real git, the fake Claude Code confined with bwrap on a private tmux server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import git
from tests.e2e.test_runtime import agent_state, eventually, show

pytestmark = pytest.mark.tmux


def test_a_refused_discard_names_the_fix_and_lists_the_agent_once(repo: Path, cli, agents) -> None:
    """Was: the agent showed as `agent running` and again as three `process inside` blockers
    (its sh, bwrap and python3, all with their cwd in the worktree), and nothing said to pause
    or retain it first."""
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    refused = cli("discard", "t")
    assert refused.code == 1
    lines = refused.err.splitlines()
    assert len([line for line in lines if "agent running" in line]) == 1
    assert not [line for line in lines if "process inside" in line], refused.err
    assert any(line.strip().startswith("fix: `laneboard pause t`") for line in lines), lines
    assert (repo / ".worktrees" / "t").is_dir()


def test_ls_does_not_say_running_for_an_agent_that_exited_unrecorded(
    repo: Path, cli, agents
) -> None:
    """Was: with no controller to record the exit, `ls` said `running` (the lifecycle state)
    for a task whose agent had ended."""
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    assert cli("send", "t", "exit 3").code == 0
    eventually(lambda: agent_state(cli, "t") == "exited(3)", "exited")
    assert show(cli, "t")["state"] == "running"  # the ledger is unchanged: reads never write
    row = next(line for line in cli("ls").out.splitlines() if line.startswith("t "))
    assert " running " not in row and "exited" in row.split()[1], row


def test_the_window_of_a_retired_task_closes_once_its_last_screen_is_in_the_journal(
    repo: Path, cli, agents, server
) -> None:
    """Was: the dead windows of finished, finalized and discarded tasks piled up in the tmux
    session (5 of 7)."""
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    pane = show(cli, "t")["pane"]["pane_id"]
    assert cli("pause", "t").code == 0  # its screen goes to the journal; the pane stays, dead
    assert pane in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout
    assert cli("supervise", "--once").code == 0
    assert pane in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout  # still live
    assert cli("discard", "t").code == 0
    assert cli("supervise", "--once").code == 0
    assert pane not in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout
    events = json.loads(cli("log", "t", "--json").out)["events"]
    kinds = [e["kind"] for e in events]
    assert kinds.index("agent.paused") < kinds.index("window.closed")
    closed = next(e for e in events if e["kind"] == "window.closed")
    assert "screen" not in closed["data"]  # the pause had saved it


def test_a_retired_tasks_window_saves_its_screen_before_it_closes(
    repo: Path, cli, agents, server
) -> None:
    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    pane = show(cli, "t")["pane"]["pane_id"]
    assert cli("retain", "t").code == 0
    assert cli("discard", "t").code == 0
    assert cli("supervise", "--once").code == 0
    assert pane not in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout
    events = json.loads(cli("log", "t", "--json").out)["events"]
    screens = [e for e in events if e["data"].get("screen")]
    assert screens and "Fake Claude Code" in screens[-1]["data"]["screen"]


def test_a_finalized_tasks_window_closes_though_its_worktree_is_kept(
    repo: Path, cli, agents, server
) -> None:
    """A finalized task whose worktree is kept (a shell still in it) stays on the board, but
    its agent never runs again: its dead window closes too."""
    import subprocess

    assert cli("new", "t").code == 0
    eventually(lambda: agent_state(cli, "t") == "idle", "idle")
    worktree = repo / ".worktrees" / "t"
    (worktree / "f.txt").write_text("work\n")
    git(worktree, "add", "f.txt")
    git(worktree, "commit", "-q", "-m", "work")
    pane = show(cli, "t")["pane"]["pane_id"]
    assert cli("pause", "t").code == 0
    assert cli("review", "t", "--mark").code == 0
    inside = subprocess.Popen(["sleep", "60"], cwd=worktree)
    try:
        done = cli("finalize", "t", "--merge")
        assert done.code == 0, done.err
        assert worktree.is_dir() and show(cli, "t")["state"] == "finalized"
        assert cli("supervise", "--once").code == 0
        assert pane not in server.cmd("list-panes", "-a", "-F", "#{pane_id}").stdout
    finally:
        inside.kill()
        inside.wait()
