"""Provisioning a new task (`laneboard new`): from a task name to a pinned branch and linked
worktree (DESIGN.md section 6). This module checks the name and chooses the branch, target and
parent; creating them, in the order of their side effects, each journalled and undone exactly on
failure, is `steps.creation`'s (which `restore` shares)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.lanes import Lease
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.names import branch_for
from laneboard.core.operations.steps.creation import create, refuse_live_name

OnWait = Callable[[Lease], None] | None


def provision(
    ctx: RepoContext,
    ledger: Ledger,
    name: str,
    base_ref: str,
    base_sha: str,
    actor: Actor,
    target: str | None = None,
    *,
    parent: Task | None = None,
    more: dict[str, Any] | None = None,
) -> Task:
    """Create task `name` with branch `<prefix>/<name>` and a worktree at `<area>/<name>`, both at
    `base_sha` (what `base_ref` named when the caller resolved it), to be integrated into
    `target` (default: the repo's integration branch). Every check that can refuse runs before
    the first write.

    `git worktree add` runs under a root-lane lease (it writes shared git metadata), so it waits
    for in-flight lane commands of the repo and holds back later ones (`ctx.on_wait` hears about
    it); `ctx.on_output` receives the setup command's output as it comes.

    A `parent` makes it that task's child (refused when the parent has
    `delegation.max_children` live children, counted in the insert's transaction); `more` goes
    into the intent event (what was asked of the agent, the try it retries).
    """
    branch = branch_for(ctx.settings.branch_prefix, name)
    refuse_live_name(ledger, ctx, name)
    extra = {"target": target or ctx.git.integration_branch(ctx.settings.target), **(more or {})}
    if parent is not None:
        extra["parent_id"] = parent.id
    return create(ctx, ledger, name, branch, base_ref, base_sha, base_sha, extra, actor)
