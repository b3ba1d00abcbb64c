"""The board's rows: what each cell of the task table says, from the read model, as plain text.

Pure (no Textual, no clock of its own: `now` is given, so snapshot tests freeze it). The table
widget turns a `Row` into styled segments; the order, the filters and the header counts are
decided here, where a unit test can see them.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from laneboard.core.domain.agents import AgentState
from laneboard.core.domain.attention import Attention, markers, needs
from laneboard.core.domain.lanes import Lease
from laneboard.core.domain.models import TaskState
from laneboard.core.domain.queue import EntryState
from laneboard.core.domain.review import Overlap
from laneboard.core.domain.views import GitState, RepoBoard, TaskView


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    width: int
    priority: int
    """Columns are dropped from the highest number first when the terminal is narrow."""


COLUMNS: tuple[Column, ...] = (
    Column("mark", "", 3, 0),
    Column("name", "TASK", 16, 0),
    Column("repo", "REPO", 10, 3),
    Column("state", "STATE", 11, 0),
    Column("agent", "AGENT", 10, 0),
    Column("pane", "PANE", 5, 4),
    Column("branch", "BRANCH → TARGET", 22, 5),
    Column("git", "GIT", 12, 1),
    Column("lane", "LANE", 18, 2),
    Column("radar", "RADAR", 14, 1),
    Column("age", "AGE", 4, 1),
)
GAP = 1


GROW = (("name", 14), ("lane", 14), ("radar", 12), ("branch", 12), ("git", 4), ("name", 60))
"""Where spare width goes, in turn: (column, at most this many more cells)."""


def fit(width: int, *, many_repos: bool = True) -> tuple[Column, ...]:
    """The columns that fit in `width` cells, in their order: the least important are dropped
    first, and spare width widens the columns that are cut most often."""
    shown = [c for c in COLUMNS if many_repos or c.key != "repo"]
    while sum(c.width + GAP for c in shown) > width and len(shown) > 3:
        worst = max(shown, key=lambda c: (c.priority, COLUMNS.index(c)))
        if worst.priority == 0:
            break
        shown.remove(worst)
    spare = width - sum(c.width + GAP for c in shown)
    widths = {c.key: c.width for c in shown}
    for key, most in GROW:
        if spare <= 0:
            break
        if key in widths:
            more = min(spare, most)
            widths[key] += more
            spare -= more
    return tuple(Column(c.key, c.title, widths[c.key], c.priority) for c in shown)


def ago(seconds: float) -> str:
    """`12s`, `5m`, `3h`, `2d`: how long ago, in at most four characters."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def git_cell(git: GitState | None, *, merged: bool = False) -> str:
    """`clean`, or the counts: `M2 S1 ?3 C1`, then `↑ahead ↓behind` against the target. A
    task `merged` into its target says so instead of counting against it (a merge commit on
    the target would read `↓1`, as if the task were behind)."""
    if git is None:
        return "…"
    if not git.present:
        return "missing"
    parts = [
        f"{letter}{n}"
        for letter, n in (
            ("C", git.conflicted),
            ("M", git.modified),
            ("S", git.staged),
            ("?", git.untracked),
        )
        if n
    ]
    text = " ".join(parts) or "clean"
    if merged:
        return f"{text} merged"
    if git.ahead:
        text += f" ↑{git.ahead}"
    if git.behind:
        text += f" ↓{git.behind}"
    return text


def _command(lease: Lease) -> str:
    words = [w.rsplit("/", 1)[-1] for w in lease.command[:3]]
    return shlex.join(words) if words else "?"


def lane_cell(view: TaskView, now: float) -> str:
    """`idle`, `running make 12s`, or `waiting: <reason>`."""
    lane = view.lane
    if lane is None:
        return "-"
    if lane.running:
        lease = lane.running[0]
        return f"running {_command(lease)} {ago(now - (lease.admitted_at or now))}"
    if lane.waiting:
        lease = lane.waiting[0]
        return f"waiting: {lease.wait_reason}" if lease.wait_reason else "waiting"
    return "idle"


def state_cell(view: TaskView) -> str:
    """The lifecycle state in a word; in the merge queue, its place in line or that it is in
    the batch under test; a task reviewed at its tip has a `✓` (`reviewed ✓` when it is ready
    for review); one whose branch moved since the review has none."""
    line = view.queue
    if line is not None and line.position is not None:
        if line.entry.state is EntryState.TESTING:
            return "in batch"
        return f"queued #{line.position}"
    task = view.task
    head = view.git.head if view.git is not None else None
    reviewed = bool(task.reviewed_sha) and (head is None or head == task.reviewed_sha)
    if task.state is TaskState.READY_FOR_REVIEW:
        return "reviewed ✓" if reviewed else "review"
    state = task.state.value.replace("_", " ")
    before_end = task.state not in (TaskState.FINALIZED, TaskState.DISCARDED)
    return f"{state} ✓" if reviewed and before_end else state


def agent_cell(view: TaskView) -> str:
    if view.agent is None:
        return "-" if view.task.agent_profile is None else (view.task.agent_state or "-")
    return str(view.agent)


def agent_states(boards: Iterable[RepoBoard]) -> dict[str, AgentState]:
    """What each running task's agent does, by task id (the input of `turns.unseen_turns`)."""
    return {
        view.task.id: view.agent.state
        for board in boards
        for view in board.tasks
        if view.agent is not None and view.task.state is TaskState.RUNNING
    }


def pane_cell(view: TaskView) -> str:
    if not view.task.tmux_pane:
        return "-"
    if view.agent is None:
        return "-"
    if view.agent.state is AgentState.LOST:
        return "gone"
    return "dead" if view.agent.state is AgentState.EXITED else "alive"


def radar_cell(conflicts: Sequence[Overlap], task_id: str, names: dict[str, str]) -> str:
    """Who this task conflicts with: `target`, other task names; empty when nothing does."""
    others: list[str] = []
    for overlap in conflicts:
        if overlap.other_id is None:
            others.insert(0, "target")
        else:
            other = overlap.other_id if overlap.task_id == task_id else overlap.task_id
            others.append(names.get(other, other[:6]))
    return ("⚡ " + ",".join(others)) if others else ""


@dataclass(frozen=True)
class Row:
    """One task as the table shows it."""

    task_id: str
    repo_id: int
    repo: str
    name: str
    attention: Attention
    cells: dict[str, str]
    view: TaskView
    updated: float
    search: str = field(repr=False, default="")
    needs: tuple[Attention, ...] = ()
    """Every kind of attention it asks for, most urgent first (`attention` is the first)."""
    host: str | None = None
    """The host whose laneboard runs it (docs/hosts.md); None on this machine."""

    def key(self) -> tuple[int, float, str]:
        """Needs-you first, then the newest task first: a task does not move while it is
        worked on (a row that jumped when its task changed would put another task under the
        cursor between two key presses)."""
        return (self.attention.value, -self.view.task.created_at, self.name)


@dataclass(frozen=True)
class _Inputs:
    """What a row says besides its view: the same view with equal inputs makes the same row."""

    repo: str
    conflicts: tuple[Overlap, ...]
    radar: str
    unseen_turn: bool
    lane: str
    age: str


Known = dict[str, tuple[TaskView, _Inputs, "Row"]]
"""Rows made before, by task id, with the view and the inputs each was made from (`rows`)."""


def rows(
    boards: Iterable[RepoBoard],
    radar: dict[str, tuple[Overlap, ...]],
    now: float,
    unseen: frozenset[str] = frozenset(),
    *,
    known: Known | None = None,
) -> list[Row]:
    """Every live task of `boards` as a row, in board order; `unseen` are the tasks whose
    agent finished a turn the operator has not looked at (`core.domain.turns`).

    With `known` (the caller's, kept between calls and updated here), a task whose view is
    the same object as last time (the feed keeps the views of tasks it did not re-read) and
    whose other inputs (its conflicts and the names they show, its unseen turn, its age and
    lane cells at `now`) are equal gets its row of last time: an update that touched one task
    makes one row, not one per task."""
    made: list[Row] = []
    for board in boards:
        repo = board.repo.root.rstrip("/").rsplit("/", 1)[-1]
        names = {view.task.id: view.task.name for view in board.tasks}
        for view in board.tasks:
            task = view.task
            conflicts = radar.get(task.id, ())
            inputs = _Inputs(
                repo,
                conflicts,
                radar_cell(conflicts, task.id, names) if conflicts else "",
                task.id in unseen,
                lane_cell(view, now),
                ago(now - task.updated_at),
            )
            before = known.get(task.id) if known is not None else None
            if before is not None and before[0] is view and before[1] == inputs:
                made.append(before[2])
                continue
            row = _row(view, board.repo.id, inputs)
            if known is not None:
                known[task.id] = (view, inputs, row)
            made.append(row)
    if known is not None and len(known) > len(made):
        shown = {row.task_id for row in made}
        for gone in [task_id for task_id in known if task_id not in shown]:
            del known[gone]
    return made


def _row(view: TaskView, repo_id: int, inputs: _Inputs) -> Row:
    task = view.task
    kinds = needs(view, len(inputs.conflicts), unseen_turn=inputs.unseen_turn)
    kind = kinds[0] if kinds else Attention.NONE
    branch = task.branch.removeprefix("refs/heads/")
    cells = {
        "mark": markers(kinds),
        "name": task.name,
        "repo": inputs.repo,
        "state": state_cell(view),
        "agent": agent_cell(view),
        "pane": pane_cell(view),
        "branch": f"{branch} → {task.target}" if task.target else branch,
        "git": git_cell(view.git, merged=task.state is TaskState.FINALIZED),
        "lane": inputs.lane,
        "radar": inputs.radar,
        "age": inputs.age,
    }
    return Row(
        task.id,
        repo_id,
        inputs.repo,
        task.name,
        kind,
        cells,
        view,
        task.updated_at,
        search=" ".join((task.name, inputs.repo, task.state.value, branch, *cells.values())),
        needs=kinds,
    )


@dataclass(frozen=True)
class Filter:
    """What the operator narrowed the board to."""

    text: str = ""
    repo: str | None = None
    needs_you: bool = False

    def keeps(self, row: Row) -> bool:
        if self.repo is not None and row.repo != self.repo:
            return False
        if self.needs_you and row.attention is Attention.NONE:
            return False
        return all(word in row.search.lower() for word in self.text.lower().split())

    def describe(self) -> str:
        parts = []
        if self.repo:
            parts.append(f"repo {self.repo}")
        if self.needs_you:
            parts.append("needs you")
        if self.text:
            parts.append(f"“{self.text}”")
        return ", ".join(parts)


def arrange(all_rows: Iterable[Row], keep: Filter, *, needs_first: bool = True) -> list[Row]:
    """The rows `keep` lets through, needs-you first (or in board order), each child right
    under its parent (`as_tree`)."""
    kept = [row for row in all_rows if keep.keeps(row)]
    return as_tree(sorted(kept, key=Row.key) if needs_first else kept)


def as_tree(ordered: list[Row]) -> list[Row]:
    """`ordered` with every child right under its parent, its name indented (`└ `). A family
    sits where its first member in `ordered` sat (a child that needs you lifts its parent's
    family), siblings keep their order; a child whose parent is not shown stands alone."""
    place = {row.task_id: n for n, row in enumerate(ordered)}
    below: dict[str | None, list[Row]] = {}
    for row in ordered:
        parent = row.view.task.parent_id
        below.setdefault(parent if parent in place else None, []).append(row)
    first: dict[str, int] = {}

    def earliest(row: Row) -> int:
        if row.task_id not in first:
            first[row.task_id] = min(
                [place[row.task_id], *(earliest(c) for c in below.get(row.task_id, []))]
            )
        return first[row.task_id]

    result: list[Row] = []

    def visit(row: Row, depth: int) -> None:
        if depth:
            indented = "  " * (depth - 1) + "└ " + row.name
            row = replace(row, cells={**row.cells, "name": indented})
        result.append(row)
        for child in sorted(below.get(row.task_id, []), key=earliest):
            visit(child, depth + 1)

    for root in sorted(below.get(None, []), key=earliest):
        visit(root, 0)
    return result
