"""Stopping a task's agent and keeping everything (`retained`), and finding panes laneboard
launched for a task that the ledger does not record (a launch killed before it wrote the
ledger). Callers hold the agents lock: the controller must not take this stop for the agent's
own exit."""

from __future__ import annotations

from collections.abc import Mapping

from laneboard.core.adapters import faults
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lifecycle import check_transition
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import PaneState, Runtime, pane_of, same_pane

STOP_SECONDS = 10.0
"""How long retain waits for an agent to exit before it says so."""


def retain_now(ledger: Ledger, task: Task, runtime: Runtime, actor: Actor) -> Task:
    check_transition(task.state, TaskState.RETAINED)
    pane = pane_of(task)
    if pane is not None:
        stopped = runtime.stop(pane, timeout=STOP_SECONDS)
        if not stopped.stopped:
            raise LaneboardError(f"{task.name}: its agent did not stop: {stopped.detail}")
        faults.checkpoint("retain.after_stop")
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="task.retained",
        state=TaskState.RETAINED,
        expect=task.state,
        agent_state="stopped" if pane is not None else task.agent_state,
    )


def unrecorded_panes(panes: Mapping[str, PaneState], task: Task) -> list[PaneState]:
    """Live panes laneboard launched for `task` that the ledger does not record as its pane (a
    command that launched one was killed before it wrote the ledger)."""
    recorded = pane_of(task)
    return [
        seen
        for seen in panes.values()
        if seen.task_id == task.id
        and seen.alive
        and not (recorded is not None and same_pane(recorded, seen))
    ]


def stop_unrecorded(runtime: Runtime, task: Task) -> None:
    """Before a launch: stop any agent an interrupted launch left for this task, so two never
    share its worktree."""
    for seen in unrecorded_panes(runtime.snapshot(), task):
        runtime.stop(seen.ref, timeout=5.0)
