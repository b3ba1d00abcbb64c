"""What stands in the way of removing a task's worktree now: the facts (`steps.facts`) judged
by the cleanup policy (`domain.cleanup`). Read only; takes no lease. Discard decides on it
under the root lane; a cancel and an undo use it to refuse what a snapshot cannot save."""

from __future__ import annotations

from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.cleanup import BlockerKind, Decision, worktree_blockers
from laneboard.core.domain.models import Task
from laneboard.core.domain.runtime import Runtime, pane_of, pane_state
from laneboard.core.operations.steps.facts import Observation, observe


def lease_store(ctx: RepoContext, ledger: Ledger) -> LeaseStore:
    return LeaseStore(ledger.database, ctx.settings.lanes.slots)


def decide(ctx: RepoContext, seen: Observation) -> Decision:
    return worktree_blockers(seen.facts, ctx.settings.cleanup.rebuildable)


def preview(ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime) -> Decision:
    """The blockers discard would meet now (read-only; takes no lease)."""
    return decide(ctx, observe(ctx, ledger, task, runtime, lease_store(ctx, ledger)))


def unsafe(ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime) -> list[str]:
    """The blockers `discard` would meet that a snapshot cannot lift, except the task's own
    provisioning lock, a lease (removal waits for the lane) and an agent that is not running:
    what a cancel must not remove."""

    if task.admin_name is None or task.identity is None:
        # Killed before the pin, so before copies and setup: the rollback removes it only
        # when it is still the pristine checkout.
        return ["its worktree was never pinned"]
    decision = preview(ctx, ledger, task, runtime)
    hard = [b for b in decision.blockers if not b.lifted_by_snapshot]
    # Its own provisioning lock, and a lease on its lane: removal waits for the lane anyway.
    hard = [b for b in hard if b.kind not in (BlockerKind.INITIALIZING, BlockerKind.LEASE)]
    hard = [b for b in hard if b.kind is not BlockerKind.AGENT or _agent_alive(runtime, task)]
    return [str(b) for b in hard]


def _agent_alive(runtime: Runtime, task: Task) -> bool:

    seen = pane_state(runtime, pane_of(task))
    return seen is not None and seen.alive
