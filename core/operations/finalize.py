"""Finalize by local merge (DESIGN.md section 7): integrate exactly the reviewed SHA of one task
into its target, serialized per repo, never touching a checkout but laneboard's own.

Every refusal is decided before anything changes (`steps.integration.plan`). Then the intent
makes this process the task's owner (`finalizing`), and under the repo's integration lane the
integration runs its journalled steps (`steps.integration.Integration`): the result computed
against the target's tip, the gate, the compare-and-swap of the target, the anchor. A stop
returns the task to `ready_for_review` with the reason journalled; an interruption is settled
from the journal and the disk. The merge queue (`operations.queue`) runs the same steps for a
batch of tasks; a finalize is a queue of one that does not wait in line.
"""

from __future__ import annotations

from laneboard.core.adapters import faults
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError, describe
from laneboard.core.domain.lanes import INTEGRATION_LANE, LeaseKind
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.operations.steps.integration import (
    Integration,
    Plan,
    Stopped,
    scratch_path,
    settle,
)


def finalize(ctx: RepoContext, ledger: Ledger, chosen: Plan, actor: Actor) -> Task:
    """Integrate `chosen.reviewed` into its target (see the module's steps). Returns the task
    `finalized` (worktree still in place); raises `Stopped` with the task back in review."""
    task = chosen.task
    old = ctx.git.branch_tip(chosen.target)
    task = ledger.update_task(
        task.id,
        actor=actor,
        kind="finalize.intent",
        state=TaskState.FINALIZING,
        expect=task.state,
        data={
            "mode": "merge",
            "reviewed": chosen.reviewed,
            "target": chosen.target,
            "target_old": old,
            "strategy": chosen.strategy,
            "into_root": chosen.checkout == str(ctx.root),
            "checkout": chosen.checkout,
            "scratch": str(scratch_path(task)),
        },
    )
    faults.checkpoint("finalize.after_intent")
    run = Integration(ctx, ledger, task, chosen, actor)
    command = ["laneboard", "finalize", task.name, "--merge", "--into", chosen.target]
    try:
        with ctx.lane(ledger, INTEGRATION_LANE, LeaseKind.INTEGRATE, command) as held:
            run.held = held
            moved = run.attempts()
    except Stopped as stop:
        run.stop(stop)
        raise
    except BaseException as err:
        # Interrupted or failed unexpectedly: the journal and the disk say whether it landed.
        try:
            settle(ctx, ledger, ledger.task(task.id), actor, reason=describe(err))
        except LaneboardError as unsettled:
            if isinstance(err, LaneboardError):
                err.details.append(f"{unsettled} (`laneboard doctor --fix` finishes it)")
        raise
    return run.finish(moved)
