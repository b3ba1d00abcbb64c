"""Retain and discard (DESIGN.md sections 7 and 8): stop or remove a task without losing work.

Discard decides from facts gathered fresh at the moment of removal (`core.facts`, under the repo's
root-lane lease, so no lane command runs meanwhile), refuses with every blocker when any stands,
and otherwise saves a snapshot first, then removes only the task's own worktree (by path and
pinned identity, re-verified right before) and its branch when laneboard created it, it still
points at the tip journalled before removal, it is in use nowhere and its commits are reachable
elsewhere. No `rm -rf`, no repo-wide prune, no branch chosen by pattern. `--force` lets a snapshot
lift the blockers it can hold (uncommitted, untracked, unique commits); nothing lifts the others.
Each step is journalled before it happens, and `complete` resumes an interrupted discard.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from core import faults, procs, snapshot
from core.cleanup import (
    Blocker,
    BlockerKind,
    Decision,
    WorktreeFacts,
    branch_blockers,
    worktree_blockers,
)
from core.errors import LaneboardError
from core.facts import admin_dir, branch_facts, commits_at_stake, gather, worktree_exists
from core.git import delete_ref_if, worktree_remove
from core.leases import Lease, LeaseKind, LeaseState, LeaseStore
from core.ledger import Ledger
from core.lifecycle import check_transition
from core.models import Actor, Task, TaskState
from core.repo import RepoContext
from core.runtime import Runtime

OnWait = Callable[[Lease], None] | None


class Refused(LaneboardError):
    """Removal refused; `details` holds one line per blocker."""


def retain(ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime, actor: Actor) -> Task:
    """Stop the agent (if one runs) and keep worktree and branch exactly as they are."""
    check_transition(task.state, TaskState.RETAINED)
    runtime.stop(task)
    return ledger.update_task(
        task.id, actor=actor, kind="task.retained", state=TaskState.RETAINED, expect=task.state
    )


def _refusal(task: Task, decision: Decision, force: bool) -> Refused:
    lines = [str(b) for b in decision.blockers]
    if force or not decision.clear_after_snapshot:
        hint = "" if not decision.hard else "; --force cannot override these"
        if force:
            lines = [str(b) for b in decision.hard]
    else:
        hint = "; --force saves them in a snapshot first, then removes"
    count = len(lines)
    return Refused(
        f"refusing to discard {task.name}: {count} blocker{'s' if count != 1 else ''}{hint}",
        details=lines,
    )


def _store(ctx: RepoContext, ledger: Ledger) -> LeaseStore:
    return LeaseStore(ledger.database, ctx.settings.lanes.slots)


def preview(ctx: RepoContext, ledger: Ledger, task: Task, runtime: Runtime) -> Decision:
    """The blockers discard would meet now (read-only; takes no lease)."""
    facts = gather(ctx, ledger, task, runtime, _store(ctx, ledger))
    return worktree_blockers(facts, ctx.settings.cleanup.rebuildable)


def discard(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    *,
    force: bool,
    runtime: Runtime,
    actor: Actor,
    on_wait: OnWait = None,
) -> Task:
    """Snapshot, then remove the task's worktree and branch; or refuse, changing nothing."""
    if task.state is TaskState.DISCARDING:
        if task.owner_pid is not None and procs.alive(task.owner_pid, task.owner_start):
            raise LaneboardError(f"{task.name} is being discarded by process {task.owner_pid}")
        raise LaneboardError(
            f"discarding {task.name} was interrupted; `laneboard doctor --fix` finishes it"
        )
    check_transition(task.state, TaskState.DISCARDING)
    store = _store(ctx, ledger)
    own = [
        x for x in store.active(task.repo_id) if x.lane == task.id and x.state is LeaseState.RUNNING
    ]
    if own:
        # Refuse now rather than queue the root lease behind a command in this very lane.
        held = tuple(
            Blocker(BlockerKind.LEASE, f"lease held: #{x.seq} `{' '.join(x.command)}`") for x in own
        )
        raise _refusal(task, Decision(held), force)
    command = ["laneboard", "discard", task.name]
    with ctx.lane(ledger, None, LeaseKind.REMOVE, command, on_wait):
        task = ledger.task(task.id)
        check_transition(task.state, TaskState.DISCARDING)
        facts = gather(ctx, ledger, task, runtime, store)
        decision = worktree_blockers(facts, ctx.settings.cleanup.rebuildable)
        if decision.hard or (decision.blockers and not force):
            raise _refusal(task, decision, force)
        # The snapshot comes first: if it cannot be made, the task is left exactly as it was.
        saved = _take(ctx, ledger, task, facts, actor)
        faults.checkpoint("discard.after_snapshot")
        pid, start = procs.me()
        task = ledger.update_task(
            task.id,
            actor=actor,
            kind="discard.intent",
            state=TaskState.DISCARDING,
            expect=task.state,
            data={
                "path": task.worktree_path,
                "branch": task.branch,
                "tip": ctx.git.branch_tip(task.branch),
                "head": facts.head,
                "admin_name": task.admin_name,
                "force": force,
                "lifted": [str(b) for b in decision.blockers],
                "snapshot": saved.ref,
            },
            owner_pid=pid,
            owner_start=start,
        )
        faults.checkpoint("discard.after_intent")
        return complete(ctx, ledger, task, runtime=runtime, store=store, actor=actor)


def complete(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    *,
    runtime: Runtime,
    store: LeaseStore,
    actor: Actor,
) -> Task:
    """Carry a task in `discarding` through worktree removal and branch deletion to
    `discarded`. Idempotent: each step checks what the journal and the disk show now, so
    `doctor --fix` can call it after a crash at any point. Must run under the root-lane lease.

    Whatever appeared since the intent is judged by the intent's own terms: without `--force`
    any blocker stops it (the task goes back to `retained`, nothing removed); with `--force` the
    soft ones are saved in a fresh snapshot when the last one no longer matches the worktree.
    """
    intent = ledger.last_event(task.id, "discard.intent")
    if intent is None:
        raise LaneboardError(f"task {task.name} has no discard intent in the journal")
    forced = bool(intent.data.get("force"))
    worktree = Path(task.worktree_path)
    saved = _latest_snapshot(ledger, task)
    if worktree_exists(ctx, task):
        facts = gather(ctx, ledger, task, runtime, store)
        decision = worktree_blockers(facts, ctx.settings.cleanup.rebuildable)
        if decision.hard or (decision.blockers and not forced):
            stopped = decision.hard if forced else decision.blockers
            task = ledger.update_task(
                task.id,
                actor=actor,
                kind="discard.stopped",
                state=TaskState.RETAINED,
                data={"blockers": [str(b) for b in stopped]},
                settled=True,
            )
            raise _refusal(task, decision, forced)
        gitdir = admin_dir(ctx, task)
        assert gitdir is not None
        if saved is None or not snapshot.matches(worktree, gitdir, saved, facts.head):
            saved = _take(ctx, ledger, task, facts, actor)
        ledger.append_event(
            task.id,
            ctx.repo.id,
            "worktree.removing",
            actor,
            {
                "path": task.worktree_path,
                "branch": task.branch,
                "head": facts.head,
                "snapshot": saved.ref,
            },
        )
        verdict = ctx.verify(task)  # right before: the path must still be the worktree we pinned
        if not verdict.ok:
            raise LaneboardError(f"{task.name}: worktree changed during discard: {verdict}")
        worktree_remove(ctx.root, worktree, force=True)
        ledger.append_event(
            task.id, ctx.repo.id, "worktree.removed", actor, {"path": task.worktree_path}
        )
    elif ctx.git.branch_tip(task.branch) is not None and saved is None:
        # The worktree is gone already; keep the branch's commits in a snapshot all the same.
        _take(ctx, ledger, task, None, actor)
    faults.checkpoint("discard.after_worktree_remove")
    _delete_branch(ctx, ledger, task, intent.data.get("tip"), actor)
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="task.discarded",
        state=TaskState.DISCARDED,
        expect=TaskState.DISCARDING,
        settled=True,
    )


def _latest_snapshot(ledger: Ledger, task: Task) -> snapshot.Snapshot | None:
    """The task's most recent snapshot, as its journal entry describes it."""
    event = ledger.last_event(task.id, "snapshot.created")
    if event is None:
        return None
    data = event.data
    return snapshot.Snapshot(
        ref=data["ref"],
        sha=data["sha"],
        head=data["head"],
        index_commit=data["index_commit"],
        tip=data.get("tip"),
        tree=data["tree"],
        index_tree=data["index_tree"],
        extras=tuple(data.get("extras", ())),
    )


def _take(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    facts: WorktreeFacts | None,
    actor: Actor,
) -> snapshot.Snapshot:
    """Save the worktree (or, when `facts` is None because it is gone, the branch) as the
    task's next snapshot, and record it."""
    prefix = f"refs/laneboard/snapshots/{task.id}/"
    existing = [n for n, _, _ in ledger.snapshots(task.id)]
    existing += [
        int(r.rsplit("/", 1)[1])
        for r in ctx.git.refs()
        if r.startswith(prefix) and r.rsplit("/", 1)[1].isdigit()
    ]
    n = snapshot.next_number(existing)
    ref = snapshot.snapshot_ref(task.id, n)
    tip = ctx.git.branch_tip(task.branch)
    message = f"laneboard snapshot {n} of task {task.name} ({task.id})"
    gitdir = admin_dir(ctx, task)
    if facts is not None and facts.head is not None and gitdir is not None:
        saved = snapshot.take(
            Path(task.worktree_path),
            gitdir,
            ref=ref,
            head=facts.head,
            tip=tip,
            extras=facts.kept_tips,
            message=message,
        )
    else:
        if tip is None:
            raise LaneboardError(f"task {task.name} has neither a worktree nor a branch to save")
        _, kept = commits_at_stake(ctx, task, None, None)
        saved = snapshot.of_commit(ctx.root, ref=ref, commit=tip, extras=kept, message=message)
    ledger.add_snapshot(
        task.id,
        ctx.repo.id,
        n,
        ref,
        saved.sha,
        actor,
        {
            "head": saved.head,
            "index_commit": saved.index_commit,
            "tip": saved.tip,
            "tree": saved.tree,
            "index_tree": saved.index_tree,
            "extras": list(saved.extras),
        },
    )
    return saved


def _delete_branch(
    ctx: RepoContext, ledger: Ledger, task: Task, recorded_tip: str | None, actor: Actor
) -> None:
    facts = branch_facts(ctx, task, recorded_tip)
    if facts.tip is None:
        ledger.append_event(task.id, ctx.repo.id, "branch.absent", actor, {"branch": task.branch})
        return
    decision = branch_blockers(facts)
    if decision.clear and delete_ref_if(ctx.root, f"refs/heads/{task.branch}", facts.tip):
        ledger.append_event(
            task.id, ctx.repo.id, "branch.deleted", actor, {"branch": task.branch, "tip": facts.tip}
        )
        return
    reasons = [str(b) for b in decision.blockers] or ["the branch moved during deletion"]
    ledger.append_event(
        task.id, ctx.repo.id, "branch.kept", actor, {"branch": task.branch, "reasons": reasons}
    )
