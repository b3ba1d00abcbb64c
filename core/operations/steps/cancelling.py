"""The cancel check: whether a cancel was asked for a task, and the line between a task no agent
was handed (a cancel undoes it) and one an agent owns (a cancel keeps it). Provisioning polls
it between steps; `operations.cancel` asks and answers."""

from __future__ import annotations

from collections.abc import Callable

from laneboard.core.adapters.ledger import Ledger
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Task, TaskState

REQUESTED = "cancel.requested"


ANSWERED = "cancel.answered"


NOT_STARTED = (TaskState.PROVISIONED, TaskState.QUEUED)
"""States of a task whose worktree no agent has been handed yet."""


STARTED = (
    TaskState.RUNNING,
    TaskState.PAUSED,
    TaskState.READY_FOR_REVIEW,
    TaskState.REVISING,
)
"""States of a task whose agent started: a cancel keeps everything."""


STARTS = ("agent.started", "agent.resumed")
"""The journal's record of a worktree handed to an agent."""


class CancelRequested(LaneboardError):
    """Provisioning stopped because the task was cancelled."""


def cancel_requested(ledger: Ledger, task_id: str) -> bool:
    """A cancel asked for this task and was not answered yet."""
    return ledger.pending(task_id, REQUESTED, ANSWERED)


def check(ledger: Ledger, task: Task) -> None:
    """Stop here (raise `CancelRequested`) when the task has been cancelled."""
    if cancel_requested(ledger, task.id):
        raise CancelRequested(f"{task.name} was cancelled")


def stop_check(ledger: Ledger, task: Task) -> Callable[[], bool]:
    """What a long step (the setup command) polls: the task has been cancelled."""
    return lambda: cancel_requested(ledger, task.id)


def ever_started(ledger: Ledger, task: Task) -> bool:
    """An agent was ever handed this worktree (any start or resume in its journal): from then
    on no cancel removes it, whatever state the task is in now."""
    return ledger.has_event(task.id, STARTS)
