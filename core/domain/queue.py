"""The merge queue's values and its one decision that is pure arithmetic: which prefix of a
batch whose gate failed to try next (DESIGN.md section 7, `operations.queue`).

A queue entry is a reviewed SHA waiting to be integrated into its target, in the order it was
added. Entries are never deleted: one that leaves the queue says why (`landed`, `returned` to
review with the reason, `removed` by the operator) and stays as a record.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from enum import StrEnum

from laneboard.core.domain.values import field, value


class EntryState(StrEnum):
    WAITING = "waiting"
    """In line for the next batch."""
    TESTING = "testing"
    """In the batch being integrated now (its task is `finalizing`)."""
    LANDED = "landed"
    RETURNED = "returned"
    """Back in review: its gate failed, it conflicts with the target, or it changed."""
    REMOVED = "removed"
    """Taken out by the operator (or a cancel of the queue)."""


ACTIVE = (EntryState.WAITING, EntryState.TESTING)


@value
class QueueEntry:
    """One task in the merge queue: exactly `sha` (its reviewed SHA when it was added) into
    `target`. `tell`: when it goes back to review, its agent is told why."""

    seq: int
    repo_id: int
    task_id: str
    target: str
    sha: str
    state: EntryState
    added_at: float
    note: str | None = None
    tell: bool = False


def next_probe(passing: int, failing: int) -> int:
    """The prefix length to gate next when the first `passing` tasks of a batch are known to
    pass and the first `failing` are known to fail (`passing < failing - 1`): the middle, so
    the culprit, the first task whose prefix fails, is found in ⌈log2 n⌉ gate runs."""
    if failing - passing < 2:
        raise ValueError("nothing left between a passing and a failing prefix")
    return (passing + failing) // 2


def longest_passing_prefix(size: int, passes: Callable[[int], bool]) -> int:
    """How many of a batch's `size` tasks pass, given that all `size` together fail and none
    (the target as it is) pass: `passes(n)` runs the gate on the first n, and is called
    ⌈log2 size⌉ times at most. The task after the prefix is the culprit."""
    passing, failing = 0, size
    while failing - passing > 1:
        probe = next_probe(passing, failing)
        if passes(probe):
            passing = probe
        else:
            failing = probe
    return passing


def bisect_runs(size: int) -> int:
    """Gate runs a bisection of a failed batch of `size` tasks takes at most."""
    return math.ceil(math.log2(size)) if size > 1 else 0


@value
class QueueLine:
    """One entry as the operator sees it: its place in its target's line (1 is next; None
    once it left the line), its task, and why it waits or left."""

    entry: QueueEntry
    name: str
    position: int | None


@value
class QueueView:
    """A repository's merge queue now."""

    lines: tuple[QueueLine, ...]
    paused: tuple[str, ...]
    """Targets whose queue is paused."""
    gate_started_at: float | None = None
    """When the gate of the batch under test started (None: no gate runs now)."""
    gate_seconds: float | None = None
    """How long the gate took lately (median), for a time-left estimate."""


@value(frozen=False)
class QueueReport:
    """What one `run` did, for the operator."""

    batches: int = 0
    gate_runs: int = 0
    landed: list[str] = field(default_factory=list)
    returned: list[tuple[str, str]] = field(default_factory=list)
    """(task name, why it went back to review)."""
    deferred: list[tuple[str, str]] = field(default_factory=list)
    """(task name, why it waits for the next batch)."""
    paused: list[str] = field(default_factory=list)
    """Targets whose queue is paused and was left waiting."""
    told: list[tuple[str, str]] = field(default_factory=list)
    """(task id, what its agent should be told): returned entries added with `tell`."""
