"""`laneboard rebase NAME`: replay the task's branch onto its target's tip, inside the task's own
worktree and under its worktree lane (so no lane command runs there meanwhile).

The agent must be paused, gone, or idle: a rebase under a working agent rewrites files it is
editing. A conflict is left exactly where git stopped, for the operator or the agent to resolve
(`git rebase --continue`) or abandon (`git rebase --abort`); laneboard never aborts it. The
reviewed SHA is not moved: the branch changed, so finalize asks for a new review. A branch that
holds merge commits is refused (a rebase redoes them and can drop what they changed); no other
branch moves (`--no-update-refs`); the branch's tip before the rebase stays reachable as
`refs/laneboard/rebased/<task id>/<sha>`.
"""

from __future__ import annotations

from pathlib import Path

from laneboard.core.adapters import vault
from laneboard.core.adapters.git import first_line, run_git
from laneboard.core.adapters.integrate import NO_HOOKS, REBASE_OPTIONS, ZERO, identity, update_ref
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.agents import AgentState
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import LeaseKind
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.runtime import Runtime, pane_of, pane_state
from laneboard.core.operations.steps import agentstate, confinement
from laneboard.core.operations.steps.commits import checked_out, refuse_merges
from laneboard.core.operations.steps.facts import admin_dir, operations_in


def rebase(
    ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime, actor: Actor
) -> tuple[Task, tuple[str, ...]]:
    """Rebase the task's branch onto its target. Returns the task and the conflicted files
    (empty when the rebase finished)."""
    confinement.settle(ctx.common_dir, task.id)
    if not task.target:
        raise LaneboardError(f"{task.name} has no target branch to rebase onto")
    onto = ctx.git.branch_tip(task.target)
    if onto is None:
        raise LaneboardError(f"target branch {task.target!r} does not exist in {ctx.root}")
    seen = pane_state(runtime, pane_of(task))
    if seen is not None and seen.alive:
        state = agentstate.observe_all(lambda _task: ctx.settings, [task], runtime).get(task.id)
        if state is None or state.state is not AgentState.IDLE:
            doing = state.state.value if state is not None else "running"
            raise LaneboardError(
                f"{task.name}: its agent is {doing}; pause it or wait until it is idle"
            )
    identity(ctx.root)
    worktree = Path(task.worktree_path)
    argv = ["git", "rebase", *REBASE_OPTIONS, onto]
    with ctx.lane(ledger, task.id, LeaseKind.REBASE, argv):
        verdict = ctx.verify(task)
        if not verdict.ok:
            raise LaneboardError(f"{task.name}: refusing to rebase: {verdict}")
        admin = admin_dir(ctx, task)
        busy = operations_in(admin) if admin is not None else []
        if busy:
            raise LaneboardError(f"{task.name}: a {busy[0]} is in progress in {worktree}")
        on = checked_out(admin)
        if on != f"refs/heads/{task.branch}":
            raise LaneboardError(
                f"{task.name}: its checkout is on {on or 'no branch'}, not {task.branch} (git "
                f"rebases what is checked out); `git switch {task.branch}` in {worktree} first"
            )
        old = ctx.git.branch_tip(task.branch)
        if old is None:
            raise LaneboardError(f"{task.name}: branch {task.branch} is gone")
        refuse_merges(ctx, task, onto, old)
        # The commits before the rebase stay reachable (a rebase rewrites them away).
        kept = f"refs/laneboard/rebased/{task.id}/{old}"
        update_ref(ctx.root, kept, old, ZERO, f"laneboard: before rebase of {task.id}")
        vault.keep_ref(ctx.repo.id, ctx.common_dir, old, kept)
        ledger.append_event(task.id, ctx.repo.id, "rebase.kept", actor, {"ref": kept, "sha": old})
        # In the task's sandbox: git works through the worktree's HEAD and admin dir, which the
        # task may rewrite meanwhile; there, nothing but its own branches can move.
        done = confinement.git_in_task(
            ctx.settings.confine.mode,
            ledger.database,
            ctx.common_dir,
            ctx.repo.id,
            task,
            [*NO_HOOKS, *argv[1:]],
        )
        in_progress = admin is not None and operations_in(admin)
        if done.returncode != 0 and not in_progress:
            raise LaneboardError(f"{task.name}: git rebase refused: {first_line(done.stderr)}")
        if done.returncode != 0:
            unmerged = run_git(["diff", "--name-only", "--diff-filter=U", "-z"], cwd=worktree)
            files = tuple(
                n.decode(errors="surrogateescape") for n in unmerged.stdout.split(b"\0") if n
            )
            ledger.append_event(
                task.id,
                ctx.repo.id,
                "rebase.stopped",
                actor,
                {"onto": onto, "old": old, "kept": kept, "files": list(files)},
            )
            if not files:
                raise LaneboardError(
                    f"{task.name}: the rebase stopped ({first_line(done.stderr)}); see `git "
                    f"status` in {worktree}: `git rebase --abort` there puts it back"
                )
            return ledger.task(task.id), files
    ctx.git.refresh()
    new = ctx.git.branch_tip(task.branch)
    ledger.append_event(
        task.id,
        ctx.repo.id,
        "rebase.done",
        actor,
        {"onto": onto, "old": old, "new": new, "kept": kept},
    )
    return ledger.task(task.id), ()
