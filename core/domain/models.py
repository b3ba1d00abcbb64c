"""The domain's values: repos, tasks, ownership facts, lifecycle states and events.

Pure: no I/O, no git, no pydantic (it stays at the config boundary; building its models costs a
quarter of a second on every start). Every value is a frozen dataclass; a change is a new value
written to the ledger in a transaction, never an in-place mutation shared between callers.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from laneboard.core.domain.identity import Identity
from laneboard.core.domain.values import field, value


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
    FINALIZING = "finalizing"
    """Integration of the reviewed SHA into the target is under way; the journal holds each
    step (the computed result, the move of the target)."""
    FINALIZED = "finalized"
    """Integrated SHA-exactly into its target, or published; retired once its worktree is
    gone."""
    DISCARDED = "discarded"
    """Worktree (and branch, when laneboard created it) removed after a snapshot (terminal)."""
    FAILED = "failed"
    """Provisioning failed and was rolled back (terminal)."""
    CANCELLING = "cancelling"
    """A cancel before the agent started is removing what the task created; the journal holds
    what is being undone (`doctor` finishes it after a crash)."""
    CANCELLED = "cancelled"
    """Cancelled before its agent started: exactly what it created was removed (terminal)."""


class Disposition(StrEnum):
    """How a task left the board; set together with the retirement time."""

    FINALIZED = "finalized"
    """Merged into its target branch here."""
    PUBLISHED = "published"
    """Pushed to a remote branch (and a pull request opened, when asked)."""
    DISCARDED = "discarded"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Actor(StrEnum):
    """Who caused an event."""

    CLI = "cli"
    TUI = "tui"
    HOOK = "hook"
    CONTROLLER = "controller"
    DOCTOR = "doctor"
    LANES = "lanes"
    """The lane scheduler: a lease was requested, admitted or released."""
    MCP = "mcp"
    """A coordinating agent, through `laneboard mcp`."""


@value
class Repo:
    """A registered repository, keyed by the realpath of its common git dir, and found again
    after a move by the device/inode of that dir and its root commit."""

    id: int
    common_dir: str
    root: str
    name: str
    created_at: float
    common_dev: int | None = None
    common_ino: int | None = None
    root_commit: str | None = None


@value
class Task:
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
    created_at: float
    updated_at: float
    target: str | None = None
    """The branch the task will be integrated into (recorded at creation); its ahead/behind
    counts are against this branch."""
    agent_profile: str | None = None
    agent_argv: list[str] | None = None
    tmux_socket: str | None = None
    tmux_session: str | None = None
    tmux_window: str | None = None
    tmux_pane: str | None = None
    reviewed_sha: str | None = None
    """The branch tip the operator reviewed (`review --mark`): the only commit finalize
    integrates."""
    finalized_sha: str | None = None
    """The reviewed SHA that was integrated or published."""
    disposition: Disposition | None = None
    retired_at: float | None = None
    owner_pid: int | None = None
    owner_start: int | None = None
    conversation_id: str | None = None
    """The agent's conversation, pinned at launch or captured from its first hook event;
    `resume` continues exactly this one."""
    agent_prompt: str | None = None
    """The first prompt, kept until the agent has been given it (a queued task)."""
    agent_state: str | None = None
    """The agent sub-state the controller last recorded (`working`, `waiting`, `exited(1)`)."""
    agent_exit: int | None = None
    agent_started_at: float | None = None
    tmux_server_pid: int | None = None
    """The tmux server's pid when the pane was made: a restarted server reuses pane ids."""
    reviewed_at: float | None = None
    target_old: str | None = None
    """The target's tip before finalize moved it."""
    target_new: str | None = None
    """The target's tip finalize moved it to."""
    pr_url: str | None = None
    """The pull request publish opened or found."""
    confined: bool | None = None
    """Its agent was started under bubblewrap (None: no agent started yet)."""
    confine_note: str | None = None
    """Why its agent runs unconfined."""
    parent_id: str | None = None
    """The task that delegated this one (`new --parent`), or None for a top-level task. Set at
    creation, never changed: the tree `ls` and the board show, and the scope of a child's MCP
    server."""

    @property
    def live(self) -> bool:
        """A live task owns its name within the repo; a retired one has given it back."""
        return self.retired_at is None


@value
class Event:
    """One entry of the append-only journal."""

    seq: int
    task_id: str | None
    repo_id: int | None
    at: float
    kind: str
    actor: Actor
    data: dict[str, Any] = field(default_factory=dict)


@value(frozen=False)
class Relocation:
    """What was done when a registered repository was found again after it moved."""

    repo: Repo
    moved_from: str
    repaired: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        said = [f"{self.repo.root}: the repository moved here from {self.moved_from}"]
        if self.repaired:
            said.append(f"repaired the worktrees of {', '.join(self.repaired)}")
        return said + self.problems
