"""Finished turns the operator has not seen: which tasks' agents ended a turn since the operator
last looked at them (`Attention.FINISHED`).

Pure: the agent states of two successive looks at the board, the set of tasks flagged before and
the task the operator looked at in, the new set out. A turn ends when an agent that was working or
waiting is idle; it stays flagged until the operator looks at that task (selects its
row, attaches to its pane, or sends it a prompt), or until the agent is no longer idle (a new
turn began, it exited, its task stopped running). Who holds the set (the board, in memory) and
what counts as a look is the caller's business; nothing here reads a clock or the ledger.
"""

from __future__ import annotations

from collections.abc import Mapping

from laneboard.core.domain.agents import AgentState

TURN_STATES = frozenset({AgentState.WORKING, AgentState.WAITING})
"""An agent seen in one of these and then idle has finished a turn (one that started and went
idle without working is ready for a first prompt, which is not a turn to look at)."""


def turn_ended(before: AgentState | None, now: AgentState | None) -> bool:
    """Whether an agent seen `before` and then `now` has just finished a turn. An agent first
    seen idle (the board just opened, the task just appeared) has not: nothing says when that
    turn ended or whether the operator saw it."""
    return before in TURN_STATES and now is AgentState.IDLE


def unseen_turns(
    flagged: frozenset[str],
    before: Mapping[str, AgentState],
    now: Mapping[str, AgentState],
    looked: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """The tasks whose finished turn the operator has not seen, after a look at the board that
    found the agents in `now` (by task id; a task without a running agent is left out), where
    the previous look found `before` and flagged `flagged`. `looked` are the tasks the operator
    looked at since: their flag is cleared, and a turn that ends as they look is seen."""
    kept = {task for task in flagged if now.get(task) is AgentState.IDLE}
    kept |= {task for task, state in now.items() if turn_ended(before.get(task), state)}
    return frozenset(kept - looked)


def seen(flagged: frozenset[str], task: str) -> frozenset[str]:
    """`flagged` once the operator looked at `task` (selected its row, attached, sent)."""
    return flagged - {task}
