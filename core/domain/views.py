"""The read model: what the service returns to the command line and the board, as plain values.

Pure values, made by `core.service` from the ledger, git and the lanes; none of them holds a
connection, a handle or a lock, so a worker thread can hand one to the UI thread as it is.
"""

from __future__ import annotations

from collections.abc import Mapping

from laneboard.core.domain.agents import State
from laneboard.core.domain.lanes import Lease, Lingering
from laneboard.core.domain.models import Event, Relocation, Repo, Task
from laneboard.core.domain.queue import QueueLine, QueueView
from laneboard.core.domain.review import FileChange
from laneboard.core.domain.values import field, value
from laneboard.core.domain.verdict import Verdict


@value
class Commit:
    """A commit as ls, show and the board name it."""

    sha: str
    subject: str
    at: float
    """Committer time, seconds since the epoch."""


@value
class GitState:
    """What a task's worktree and branch hold right now (one `git status` of the worktree; its
    branch against its target from the object store)."""

    present: bool
    """The worktree is there and verifies (the counts below are read only then)."""
    head: str | None = None
    detached: bool = False
    staged: int = 0
    modified: int = 0
    """Unstaged changes to tracked files (deletions included)."""
    untracked: int = 0
    conflicted: int = 0
    ahead: int | None = None
    """Commits on the task's branch (or detached HEAD) that its target does not have; None
    without a target."""
    behind: int | None = None
    last_commit: Commit | None = None
    problem: str | None = None
    """Why nothing could be read (the worktree is gone, or fails verification)."""

    @property
    def clean(self) -> bool:
        return self.present and not (
            self.staged or self.modified or self.untracked or self.conflicted
        )


@value
class LaneView:
    """One lane of a repo as the board shows it: what runs there and what waits for it."""

    label: str
    """`root`, or the task's name."""
    task_id: str | None
    running: tuple[Lease, ...] = ()
    waiting: tuple[Lease, ...] = ()
    lingering: tuple[Lingering, ...] = ()
    """Processes that keep a running lease whose command has exited (`laneboard lanes` looks;
    the board does not)."""

    def left_by(self, lease: Lease) -> tuple[Lingering, ...]:
        return tuple(found for found in self.lingering if found.lease == lease.seq)


@value
class LanesView:
    """Every lane of the repos asked for, with the machine-wide slot count and use."""

    slots: int
    used: int
    repos: tuple[tuple[Repo, tuple[LaneView, ...]], ...]


@value
class TaskView:
    """A task with the repo it belongs to and, when asked for, what it holds and does now."""

    task: Task
    repo: Repo
    git: GitState | None = None
    lane: LaneView | None = None
    verdict: Verdict | None = None
    agent: State | None = None
    """What its agent is doing now (working, waiting, idle, exited, lost), if it has a pane."""
    queue: QueueLine | None = None
    """Its place in the merge queue, while it is in line or in the batch under test."""


@value
class RepoBoard:
    """One repository on the board: its lanes and its live tasks."""

    repo: Repo
    lanes: tuple[LaneView, ...]
    tasks: tuple[TaskView, ...]
    problem: str | None = None
    """Why the repository could not be read (moved away, a broken config); tasks are then
    shown from the ledger alone."""
    queue: QueueView | None = None
    """Its merge queue, when anything is in line."""


@value
class BoardSnapshot:
    """Everything the board shows, read at one moment without writing anything."""

    at: float
    slots: int
    used: int
    repos: tuple[RepoBoard, ...]
    cursor: int
    """The journal position this snapshot reflects; `changes(cursor)` continues from it."""


@value
class Changes:
    """What the journal recorded after a cursor: task events and lease transitions, in order."""

    events: tuple[Event, ...]
    cursor: int


@value
class Registration:
    """The outcome of registering a repository."""

    repo: Repo
    registered: bool
    """False when it was registered already."""
    relocation: Relocation | None = None


@value
class Outcome:
    """A command that changed a task (or found nothing to change, `changed` False)."""

    task: Task
    repo: Repo
    changed: bool = True
    snapshot: str | None = None
    """The snapshot ref a discard saved the task in."""
    notes: tuple[str, ...] = field(default=())
    """What else the operator should hear (a repository found moved, what was kept)."""


@value
class Finding:
    """One disagreement between the ledger and the world (`laneboard doctor`).

    `kind` is a stable identifier (documented in docs/cli.md); `fixed` says what `--fix` did, or
    starts with `not fixed:` and says why it could not.
    """

    kind: str
    detail: str
    task: str | None = None
    task_id: str | None = None
    fixed: str | None = None

    @property
    def resolved(self) -> bool:
        return self.fixed is not None and not self.fixed.startswith("not fixed")


@value
class ShimDir:
    """A task's bin directory of lane command shims."""

    task: Task
    path: str
    commands: tuple[str, ...]


@value
class Watched:
    """One live task's places on disk whose changes the board watches."""

    task_id: str
    worktree: str
    admin_dir: str | None
    """`<common dir>/worktrees/<name>`: HEAD, index and logs change there on a commit."""


@value
class WatchedRepo:
    """One repository's refs: when a branch moves (the target, or a task's branch moved from
    elsewhere), every task of the repo is behind or ahead by another count."""

    common_dir: str
    task_ids: tuple[str, ...]


@value
class WatchSet:
    """Everything the board watches, as the service names it."""

    ledger: str
    """The ledger's directory (its WAL changes on every commit of another process)."""
    events: str
    """The directory of the agents' hook event files."""
    worktrees: tuple[Watched, ...]
    repos: tuple[WatchedRepo, ...] = ()
    fences: str = ""
    """Where readers put the fences the controller's watch answers (docs/board.md)."""


@value
class Keeping:
    """What the controller's watch covers, so the states it computes can be kept as proven."""

    epoch: str
    """The watch that has seen every change to these tasks since before their states were
    computed."""
    covered: frozenset[str]
    """Tasks whose every directory the watch covers (not a directory added since)."""
    skipped: Mapping[str, tuple[str, ...]]
    """Per task, the directories of its worktree the watch leaves out (caches), relative: a
    state is kept only when git ignores every one of them (else a change there matters, and
    no watch would see it)."""


@value
class BoardConfig:
    """What the board reads from the user's configuration."""

    theme: str | None
    bell: bool
    keys: dict[str, str]
    preview_lines: int
    desktop: str = "auto"
    """`auto`, `notify-send`, `osc9`, `osc777` or `off` (`[board] desktop`)."""
    ntfy: str | None = None
    webhook: str | None = None
    push_every: float = 300.0


@value
class Check:
    """A check a task reported about its own work (`laneboard signal --check NAME=pass`)."""

    name: str
    passed: bool
    at: float


@value
class Completion:
    """What a finished child hands its parent: where its work is and what git says it holds.

    Built fresh from the ledger and git each time (`Service.completion`); `done` says whether
    the child has finished (ready for review, failed, cancelled, or retired otherwise). Nothing
    in it was merged, pushed or removed: a child's exit never does any of that."""

    task: Task
    repo: Repo
    done: bool
    head_sha: str | None
    """What the work ends at: the worktree's HEAD, else (worktree gone) the branch tip, else
    the SHA it was finalized or reviewed at."""
    ahead: int
    """Commits from the base SHA to the head."""
    files: tuple[FileChange, ...]
    """What the commits from the base SHA changed, with +/- line counts."""
    staged: tuple[str, ...] = ()
    modified: tuple[str, ...] = ()
    untracked: tuple[str, ...] = ()
    conflicted: tuple[str, ...] = ()
    worktree_problem: str | None = None
    """Why the worktree could not be read (gone, fails verification), else None."""
    checks: tuple[Check, ...] = ()
    """The newest result of each check the task reported, by name."""
    message: str | None = None
    """The agent's last message: what it said with `laneboard signal --message`, else what its
    hooks reported."""
    screen: str = ""
    """The tail of its pane's screen: from when it finished, else now."""
    reason: str | None = None
    """Why it failed or was cancelled, when it did."""
    branch_sha: str | None = None
    """The tip of its branch now (None once the branch is gone or another task has it)."""
    detached: bool = False
    """Its worktree's HEAD is not on its branch (commits there are not on the branch)."""
    lost: bool = False
    """Its agent's pane is gone while the task is running: nothing will happen until it is
    resumed."""

    @property
    def clean(self) -> bool:
        """The worktree holds nothing uncommitted (and could be read)."""
        return self.worktree_problem is None and not (
            self.staged or self.modified or self.untracked or self.conflicted
        )


def latest_checks(events: list[Event]) -> tuple[Check, ...]:
    """The newest result of each reported check, in the order they were first reported."""
    found: dict[str, Check] = {}
    for event in events:
        if event.kind == "check.reported":
            name = str(event.data.get("name"))
            found[name] = Check(name, event.data.get("result") == "pass", event.at)
    return tuple(found.values())
