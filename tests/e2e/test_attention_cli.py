"""What the command line tells the operator (issue 20, items 4 and 8): a refused discard names
its fix, one agent is one blocker, and `ls` does not call a task whose agent exited `running`.
Real git, the fake Claude Code confined with bwrap on a private tmux server."""

from __future__ import annotations

from pathlib import Path

import pytest

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
