"""Task lifecycle transitions as one table (DESIGN.md section 6).

Pure. An illegal transition raises; it is never a silent no-op. Beyond the design's diagram:
`discarding` makes removal resumable after a crash, and a task that never reached review
(provisioned, queued, running, paused, revising) may still be retained or discarded, because an
operator must be able to stop and clean up any live task.
"""

from __future__ import annotations

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Disposition, TaskState

S = TaskState

TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    S.NEW: frozenset({S.PROVISIONING}),
    S.PROVISIONING: frozenset({S.PROVISIONED, S.FAILED}),
    S.PROVISIONED: frozenset({S.QUEUED, S.RUNNING, S.RETAINED, S.DISCARDING}),
    S.QUEUED: frozenset({S.RUNNING, S.RETAINED, S.DISCARDING}),
    S.RUNNING: frozenset({S.PAUSED, S.READY_FOR_REVIEW, S.RETAINED, S.DISCARDING}),
    S.PAUSED: frozenset({S.RUNNING, S.QUEUED, S.RETAINED, S.DISCARDING}),
    S.READY_FOR_REVIEW: frozenset({S.REVISING, S.FINALIZED, S.RETAINED, S.DISCARDING}),
    S.REVISING: frozenset({S.RUNNING, S.READY_FOR_REVIEW, S.RETAINED, S.DISCARDING}),
    S.RETAINED: frozenset({S.QUEUED, S.RUNNING, S.DISCARDING}),
    # A removal that refused half-way (a blocker appeared) returns the task to retained.
    S.DISCARDING: frozenset({S.DISCARDED, S.RETAINED}),
    S.FINALIZED: frozenset(),
    S.DISCARDED: frozenset(),
    S.FAILED: frozenset(),
}

DISPOSITION_OF: dict[TaskState, Disposition] = {
    S.FINALIZED: Disposition.FINALIZED,
    S.DISCARDED: Disposition.DISCARDED,
    S.FAILED: Disposition.FAILED,
}
"""States that retire a task: its name becomes free again; its row and journal stay forever."""


OWNED = frozenset({S.PROVISIONING, S.DISCARDING})
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
