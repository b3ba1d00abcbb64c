"""The domain's values: repos, tasks, ownership facts, lifecycle states, events and leases.

Pure: no I/O, no git. Every model is frozen; a change is a new value written to the ledger in a
transaction, never an in-place mutation shared between callers.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaskState(StrEnum):
    """Where a task is in its lifecycle (DESIGN.md section 6). Transitions live in `lifecycle`."""

    NEW = "new"
    """Named, nothing recorded on disk yet."""
    PROVISIONING = "provisioning"
    """Intent is in the ledger; branch and worktree are being created."""
    PROVISIONED = "provisioned"
    """Branch and worktree exist and are pinned; no agent has started."""
    QUEUED = "queued"
    """Waiting for an agent slot (`agents.max_running`)."""
    RUNNING = "running"
    """The agent runs in its pane."""
    PAUSED = "paused"
    """The agent was stopped; worktree and branch stay exactly as they are."""
    READY_FOR_REVIEW = "ready_for_review"
    """The agent exited or said it is done; waiting for the operator."""
    REVISING = "revising"
    """The operator sent the task back with a prompt."""
    RETAINED = "retained"
    """Agent stopped, capacity released; worktree and branch kept for the operator."""
    DISCARDING = "discarding"
    """Removal is under way; the journal holds what is being removed."""
    FINALIZED = "finalized"
    """Integrated SHA-exactly into its target (terminal)."""
    DISCARDED = "discarded"
    """Worktree (and branch, when laneboard created it) removed after a snapshot (terminal)."""
    FAILED = "failed"
    """Provisioning failed and was rolled back (terminal)."""


class Disposition(StrEnum):
    """How a task left the board; set together with the retirement time."""

    FINALIZED = "finalized"
    DISCARDED = "discarded"
    FAILED = "failed"


class Actor(StrEnum):
    """Who caused an event."""

    CLI = "cli"
    TUI = "tui"
    HOOK = "hook"
    CONTROLLER = "controller"
    DOCTOR = "doctor"


class Identity(_Frozen):
    """Device and inode of a worktree dir and its `.git` file, pinned right after creation.

    A moved, copied or replaced worktree has another identity, so verification rejects it.
    """

    dir_dev: int
    dir_ino: int
    gitfile_dev: int
    gitfile_ino: int


class Repo(_Frozen):
    """A registered repository, keyed by the realpath of its common git dir."""

    id: int
    common_dir: str
    root: str
    name: str
    created_at: float


class Task(_Frozen):
    """One ticket run and the ownership facts laneboard recorded about it.

    `*_created_by_us` are the only licence laneboard has to remove a branch or worktree; they are
    written once, from what laneboard itself observed, and never inferred later.
    """

    id: str
    repo_id: int
    name: str
    state: TaskState
    base_ref: str
    base_sha: str
    branch: str
    branch_created_by_us: bool
    branch_tip_at_creation: str | None
    area: str
    worktree_path: str
    admin_name: str | None
    worktree_created_by_us: bool
    identity: Identity | None
    agent_profile: str | None = None
    agent_argv: list[str] | None = None
    tmux_socket: str | None = None
    tmux_session: str | None = None
    tmux_window: str | None = None
    tmux_pane: str | None = None
    reviewed_sha: str | None = None
    finalized_sha: str | None = None
    disposition: Disposition | None = None
    retired_at: float | None = None
    owner_pid: int | None = None
    owner_start: int | None = None
    created_at: float
    updated_at: float

    @property
    def live(self) -> bool:
        """A live task owns its name within the repo; a retired one has given it back."""
        return self.retired_at is None


class Event(_Frozen):
    """One entry of the append-only journal."""

    seq: int
    task_id: str | None
    repo_id: int | None
    at: float
    kind: str
    actor: Actor
    data: dict[str, Any] = Field(default_factory=dict)


class LeaseState(StrEnum):
    """A lease waits, then runs while its command lives, then is released."""

    WAITING = "waiting"
    RUNNING = "running"
    RELEASED = "released"


class LeaseKind(StrEnum):
    """What a lease was taken for."""

    EXEC = "exec"
    PROVISION = "provision"
    REMOVE = "remove"
    RESTORE = "restore"
    INTEGRATE = "integrate"
    SETUP = "setup"


class Lease(_Frozen):
    """A claim on a lane. `seq` orders arrivals; `lane` is None for the repo's root lane.

    Released only after the holder's command has exited (or the holder is dead), never merely
    because a stop was requested.
    """

    seq: int
    repo_id: int
    lane: str | None
    kind: LeaseKind
    state: LeaseState
    holder_pid: int
    holder_start: int
    command: list[str]
    created_at: float
    admitted_at: float | None = None
    released_at: float | None = None
    release_reason: str | None = None

    @property
    def is_root(self) -> bool:
        """A root-lane lease conflicts with every lane of its repo."""
        return self.lane is None
