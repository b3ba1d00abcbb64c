"""The needs-you decision over a table of cases: what each task asks of the operator
(`attention.needs`), and which finished turns the operator has not seen yet (`turns`)."""

from __future__ import annotations

from typing import Any

import pytest

from laneboard.core.domain.agents import AgentState, State
from laneboard.core.domain.attention import Attention, needs
from laneboard.core.domain.models import TaskState
from laneboard.core.domain.turns import seen, turn_ended, unseen_turns
from laneboard.core.domain.verdict import Reason, Verdict
from laneboard.core.domain.views import TaskView
from tests.tui.boards import clean, repo, task

A = AgentState
W, C, F, L, T, R = (
    Attention.WAITING,
    Attention.CONFLICTED,
    Attention.FAILED,
    Attention.LOST,
    Attention.FINISHED,
    Attention.REVIEW,
)


def view(
    state: TaskState = TaskState.RUNNING,
    agent: State | None = None,
    conflicted: int = 0,
    verdict: Verdict | None = None,
) -> TaskView:
    return TaskView(
        task(1, "t", state), repo(1, "shop"), clean(conflicted=conflicted), None, verdict, agent
    )


BROKEN = Verdict(False, Reason.MISSING, "the worktree is gone")

CASES: list[tuple[str, TaskView, dict[str, Any], tuple[Attention, ...]]] = [
    ("working: nothing", view(agent=State(A.WORKING)), {}, ()),
    ("idle, turn seen: nothing", view(agent=State(A.IDLE)), {}, ()),
    ("idle, turn not seen", view(agent=State(A.IDLE)), {"unseen_turn": True}, (T,)),
    # a flag left over from a turn is not believed once the agent works again
    ("working, stale flag", view(agent=State(A.WORKING)), {"unseen_turn": True}, ()),
    ("waiting for an answer", view(agent=State(A.WAITING)), {}, (W,)),
    ("exited 0: nothing", view(agent=State(A.EXITED, 0)), {}, ()),
    ("exited 1", view(agent=State(A.EXITED, 1)), {}, (F,)),
    ("pane gone", view(agent=State(A.LOST)), {}, (L,)),
    ("task failed", view(TaskState.FAILED), {}, (F,)),
    ("fails verification", view(agent=State(A.IDLE), verdict=BROKEN), {}, (F,)),
    ("conflicted files", view(agent=State(A.WORKING), conflicted=2), {}, (C,)),
    ("its own work conflicts (radar)", view(agent=State(A.WORKING)), {"radar_conflicts": 1}, (C,)),
    # item 1 of issue 20: a task with no work of its own gets no radar line, so no marker
    ("no own work: the radar has nothing on it", view(agent=State(A.IDLE)), {}, ()),
    ("ready for review", view(TaskState.READY_FOR_REVIEW), {}, (R,)),
    ("ready and conflicting", view(TaskState.READY_FOR_REVIEW), {"radar_conflicts": 2}, (C, R)),
    (
        "waiting, conflicting, unseen turn ignored while waiting",
        view(agent=State(A.WAITING), conflicted=1),
        {"unseen_turn": True},
        (W, C),
    ),
    (
        "idle with an unseen turn and a conflict",
        view(agent=State(A.IDLE)),
        {"unseen_turn": True, "radar_conflicts": 1},
        (C, T),
    ),
    ("paused: nothing", view(TaskState.PAUSED), {"unseen_turn": True}, ()),
    ("retained: nothing", view(TaskState.RETAINED), {}, ()),
]


@pytest.mark.parametrize(
    ("case", "seen_view", "given", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_what_a_task_asks_of_the_operator(
    case: str, seen_view: TaskView, given: dict[str, Any], expected: tuple[Attention, ...]
) -> None:
    assert needs(seen_view, **given) == expected, case


TURNS = [
    # (before, now, ended)
    (A.WORKING, A.IDLE, True),
    (A.WAITING, A.IDLE, True),
    (A.STARTING, A.IDLE, False),  # started and ready for a first prompt: no turn yet
    (None, A.IDLE, False),  # first seen idle: the board just opened, nothing says it is new
    (A.IDLE, A.IDLE, False),
    (A.WORKING, A.WORKING, False),
    (A.WORKING, A.EXITED, False),  # an exit is its own kind (failed, or ready for review)
    (A.WORKING, A.WAITING, False),
]


@pytest.mark.parametrize(("before", "now", "ended"), TURNS)
def test_a_turn_ends_when_a_busy_agent_goes_idle(
    before: AgentState | None, now: AgentState, ended: bool
) -> None:
    assert turn_ended(before, now) is ended


def test_a_finished_turn_stays_flagged_until_the_operator_looks() -> None:
    flagged = unseen_turns(
        frozenset(), {"a": A.WORKING, "b": A.WORKING}, {"a": A.IDLE, "b": A.IDLE}
    )
    assert flagged == {"a", "b"}
    # more looks at the board with nothing new keep it
    flagged = unseen_turns(flagged, {"a": A.IDLE, "b": A.IDLE}, {"a": A.IDLE, "b": A.IDLE})
    assert flagged == {"a", "b"}
    assert seen(flagged, "a") == {"b"}
    # a look at the task as its turn ends: seen at once
    assert unseen_turns(frozenset(), {"a": A.WORKING}, {"a": A.IDLE}, frozenset({"a"})) == set()


def test_a_flag_goes_when_the_agent_is_no_longer_idle() -> None:
    flagged = frozenset({"a", "b", "c"})
    now = {"a": A.WORKING, "b": A.EXITED}  # c: its task stopped running (no agent state)
    assert unseen_turns(flagged, {"a": A.IDLE, "b": A.IDLE, "c": A.IDLE}, now) == set()
