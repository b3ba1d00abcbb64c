"""What on the board needs the operator, and in which order (the board's "Needs you").

Pure: a task's view, its radar conflicts and whether it has a finished turn the operator has
not seen (`core.domain.turns`) in, the kinds of `Attention` it asks for out. The board sorts by
the most urgent, marks each row with the `marker` of every kind (never by colour alone, and no
kind hiding another), and counts each kind in its header; the terminal title, the bell and the
desktop notification use `notifies`, a push to a phone only `blocks`.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum

from laneboard.core.domain.agents import AgentState
from laneboard.core.domain.models import TaskState
from laneboard.core.domain.views import TaskView


class Attention(Enum):
    """Why a task needs the operator, most urgent first (the value is the sort rank)."""

    WAITING = 0
    """Its agent waits for input or an approval."""
    CONFLICTED = 1
    """Its worktree holds unresolved conflicts, or its branch conflicts with its target or with
    another task (the conflict radar)."""
    FAILED = 2
    """Its agent exited with a non-zero code, or its worktree fails verification."""
    LOST = 3
    """Its agent's pane is gone (the tmux server died, or the pane was killed)."""
    FINISHED = 4
    """Its agent finished a turn the operator has not looked at yet (selecting the row,
    attaching or sending counts as looking)."""
    REVIEW = 5
    """It is ready for review."""
    NONE = 9
    """Nothing to do: it works, idles, is paused or retained."""

    @property
    def marker(self) -> str:
        """One character shown in the row's first column, so the state reads without colour."""
        return MARKERS[self]

    @property
    def label(self) -> str:
        return LABELS[self]

    @property
    def notifies(self) -> bool:
        """The operator is told when a task comes into this state (bell, title count)."""
        return self in (Attention.WAITING, Attention.FINISHED, Attention.REVIEW)

    @property
    def blocks(self) -> bool:
        """Nothing moves on until the operator acts: worth a push to their phone."""
        return self in (Attention.WAITING, Attention.FAILED, Attention.REVIEW)


MARKERS = {
    Attention.WAITING: "?",
    Attention.CONFLICTED: "!",
    Attention.FAILED: "x",
    Attention.LOST: "~",
    Attention.FINISHED: ">",
    Attention.REVIEW: "*",
    Attention.NONE: " ",
}
LABELS = {
    Attention.WAITING: "waiting",
    Attention.CONFLICTED: "conflicted",
    Attention.FAILED: "failed",
    Attention.LOST: "lost",
    Attention.FINISHED: "turn done",
    Attention.REVIEW: "review",
    Attention.NONE: "",
}


def needs(
    view: TaskView, radar_conflicts: int = 0, *, unseen_turn: bool = False
) -> tuple[Attention, ...]:
    """Every kind of attention `view` asks for, most urgent first (empty: nothing). Kinds never
    hide each other: a task ready for review whose branch conflicts asks for both.
    `radar_conflicts` is how many radar lines of this task conflict (with its target or another
    task); `unseen_turn` says its agent finished a turn the operator has not looked at (it
    counts only while the agent is still idle in a running task)."""
    task, agent, git = view.task, view.agent, view.git
    running = task.state is TaskState.RUNNING and agent is not None
    found: list[Attention] = []
    if running and agent is not None and agent.state is AgentState.WAITING:
        found.append(Attention.WAITING)
    if (git is not None and git.conflicted) or radar_conflicts:
        found.append(Attention.CONFLICTED)
    failed = (view.verdict is not None and not view.verdict.ok) or task.state is TaskState.FAILED
    if running and agent is not None:
        failed = failed or (agent.state is AgentState.EXITED and agent.code not in (None, 0))
        if agent.state is AgentState.LOST:
            found.append(Attention.LOST)
        if unseen_turn and agent.state is AgentState.IDLE:
            found.append(Attention.FINISHED)
    if failed:
        found.append(Attention.FAILED)
    if task.state is TaskState.READY_FOR_REVIEW:
        found.append(Attention.REVIEW)
    return tuple(sorted(found, key=lambda kind: kind.value))


def attention(view: TaskView, radar_conflicts: int = 0, *, unseen_turn: bool = False) -> Attention:
    """The most urgent kind of attention `view` asks for (what the board sorts by)."""
    return next(iter(needs(view, radar_conflicts, unseen_turn=unseen_turn)), Attention.NONE)


def markers(kinds: Iterable[Attention]) -> str:
    """The markers of `kinds`, side by side (a blank for none)."""
    return "".join(kind.marker for kind in kinds) or Attention.NONE.marker


def counts(kinds: Iterable[Attention]) -> dict[Attention, int]:
    """How many tasks need each kind of attention (kinds with none are left out). `kinds` holds
    one kind per task, or each task's every kind (`needs`) flattened: a task counts once in each
    kind it asks for."""
    found: dict[Attention, int] = {}
    for kind in kinds:
        if kind is not Attention.NONE:
            found[kind] = found.get(kind, 0) + 1
    return found
