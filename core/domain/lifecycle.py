"""Task lifecycle transitions as one table (DESIGN.md section 6).

Pure. An illegal transition raises; it is never a silent no-op. Beyond the design's diagram:
`discarding` makes removal resumable after a crash, and a task that never reached review
(provisioned, queued, running, paused, revising) may still be retained or discarded, because an
operator must be able to stop and clean up any live task.

Finalize is a multi-step change too (`finalizing`): a conflict or a failed gate returns the task
to `ready_for_review`. A finalized task retires once its worktree is gone; while it is still there
(publish keeps it for the pull request; a cleanup blocker kept it) the task stays live, and a
discard of it removes the worktree and leaves it `finalized`.
"""

from __future__ import annotations

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Disposition, TaskState

S = TaskState

TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    S.NEW: frozenset({S.PROVISIONING}),
    S.PROVISIONING: frozenset({S.PROVISIONED, S.FAILED, S.CANCELLED}),
    S.PROVISIONED: frozenset(
        {S.QUEUED, S.RUNNING, S.RETAINED, S.DISCARDING, S.FINALIZING, S.CANCELLING}
    ),
    S.QUEUED: frozenset({S.RUNNING, S.RETAINED, S.DISCARDING, S.CANCELLING}),
    S.RUNNING: frozenset({S.PAUSED, S.READY_FOR_REVIEW, S.RETAINED, S.DISCARDING, S.FINALIZING}),
    S.PAUSED: frozenset({S.RUNNING, S.QUEUED, S.RETAINED, S.DISCARDING, S.FINALIZING}),
    S.READY_FOR_REVIEW: frozenset({S.REVISING, S.FINALIZING, S.RETAINED, S.DISCARDING}),
    S.REVISING: frozenset({S.RUNNING, S.READY_FOR_REVIEW, S.RETAINED, S.DISCARDING, S.FINALIZING}),
    S.RETAINED: frozenset({S.QUEUED, S.RUNNING, S.DISCARDING, S.FINALIZING}),
    S.FINALIZING: frozenset({S.FINALIZED, S.READY_FOR_REVIEW}),
    # A removal that refused half-way (a blocker appeared) returns the task to retained, or to
    # finalized when it was the cleanup of a finalized task.
    S.DISCARDING: frozenset({S.DISCARDED, S.RETAINED, S.FINALIZED}),
    S.FINALIZED: frozenset({S.DISCARDING}),
    S.DISCARDED: frozenset(),
    S.FAILED: frozenset(),
    # A cancel before the agent started: only a task no agent ever ran in (the handoff to the
    # agent is the start's own transition to running, so the two can never both happen).
    S.CANCELLING: frozenset({S.CANCELLED}),
    S.CANCELLED: frozenset(),
}

DISPOSITION_OF: dict[TaskState, Disposition] = {
    S.FINALIZED: Disposition.FINALIZED,
    S.DISCARDED: Disposition.DISCARDED,
    S.FAILED: Disposition.FAILED,
    S.CANCELLED: Disposition.CANCELLED,
}
"""States that retire a task: its name becomes free again; its row and journal stay forever
(a finalized task whose worktree is still there retires when the worktree goes)."""


OWNED = frozenset({S.PROVISIONING, S.DISCARDING, S.FINALIZING, S.CANCELLING})
"""States that span several effects: one process owns the task while it is in them (DESIGN.md
section 3), and only that owner, or `doctor` once the owner is dead and it has claimed the
task, may change it."""


class IllegalTransition(LaneboardError):
    """A state change the table does not allow."""


def check_transition(current: TaskState, target: TaskState) -> TaskState:
    """Return `target` if `current -> target` is in the table; raise otherwise."""
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"a task that is {current.value} cannot become {target.value}")
    return target


def is_terminal(state: TaskState) -> bool:
    """True for states that retire the task (no transition leaves them)."""
    return not TRANSITIONS[state]
