"""Which turn a controller checkpoints: the name `_turn` gives the turn that just ended."""

from __future__ import annotations

from pathlib import Path

import pytest

from laneboard.core.adapters import agentfiles
from laneboard.core.adapters.config import state_dir
from laneboard.core.domain.agents import HOOK_STATES, AgentState, State
from laneboard.core.domain.models import TaskState
from laneboard.core.service.reviewloop import ReviewLoopCommands
from tests.tui.boards import task

IDLE_BY_HOOK = State(AgentState.IDLE, source="hook")


def test_a_turn_ends_at_an_idle_hook_event_and_is_named_by_it(isolated_env: Path) -> None:
    running = task(1, "t", TaskState.RUNNING)
    agentfiles.append_event(state_dir(), running.id, "UserPromptSubmit")
    agentfiles.append_event(state_dir(), running.id, "Stop")
    name = ReviewLoopCommands._turn(running, IDLE_BY_HOOK, AgentState.WORKING)
    assert name is not None and name.startswith("hook Stop ")


@pytest.mark.parametrize(
    "newer", sorted(name for name, state in HOOK_STATES.items() if state is not AgentState.IDLE)
)
def test_an_event_newer_than_the_idle_state_is_no_turn_end(isolated_env: Path, newer: str) -> None:
    """The state was read from a `Stop`, then the next turn's first event was written before
    the controller read the last event: that turn has not ended, and checkpointing now would
    save the worktree before the turn's work (a `checkpoint.unchanged` for it)."""
    running = task(1, "t", TaskState.RUNNING)
    agentfiles.append_event(state_dir(), running.id, "Stop")
    agentfiles.append_event(state_dir(), running.id, newer)
    assert ReviewLoopCommands._turn(running, IDLE_BY_HOOK, AgentState.IDLE) is None
