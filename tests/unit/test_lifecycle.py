"""The lifecycle table: legal transitions pass, illegal ones raise, terminal states stay."""

from __future__ import annotations

import pytest

from laneboard.core.domain.lifecycle import (
    DISPOSITION_OF,
    TRANSITIONS,
    IllegalTransition,
    check_transition,
    is_terminal,
)
from laneboard.core.domain.models import TaskState


def test_every_state_has_a_row() -> None:
    assert set(TRANSITIONS) == set(TaskState)


def test_provisioning_ends_provisioned_or_failed() -> None:
    assert check_transition(TaskState.PROVISIONING, TaskState.PROVISIONED) is TaskState.PROVISIONED
    assert check_transition(TaskState.PROVISIONING, TaskState.FAILED) is TaskState.FAILED


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (TaskState.PROVISIONED, TaskState.FINALIZED),
        (TaskState.FAILED, TaskState.PROVISIONING),
        (TaskState.DISCARDED, TaskState.RUNNING),
        (TaskState.NEW, TaskState.RUNNING),
    ],
)
def test_illegal_transitions_raise(current: TaskState, target: TaskState) -> None:
    with pytest.raises(IllegalTransition, match=f"{current.value} cannot become {target.value}"):
        check_transition(current, target)


def test_terminal_states_retire_and_a_finalized_task_can_only_lose_its_worktree() -> None:
    assert {s for s in TaskState if is_terminal(s)} == set(DISPOSITION_OF) - {TaskState.FINALIZED}
    assert TRANSITIONS[TaskState.FINALIZED] == {TaskState.DISCARDING}


def test_finalize_ends_finalized_or_back_in_review() -> None:
    assert TRANSITIONS[TaskState.FINALIZING] == {TaskState.FINALIZED, TaskState.READY_FOR_REVIEW}
    assert TaskState.FINALIZED not in {
        target
        for state, targets in TRANSITIONS.items()
        if state is not TaskState.FINALIZING
        for target in targets
        if state is not TaskState.DISCARDING
    }
