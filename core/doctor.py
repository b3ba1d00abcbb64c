"""Reconciliation of the ledger with git (and, once the runtime exists, tmux).

Reports what disagrees: tasks whose worktree or branch is missing, worktrees in an area that no
task owns (shown as unowned, never deleted), changes interrupted by a crash. With `fix`, it
finishes or undoes only what exactly matches the intent recorded in the ledger; anything it cannot
prove is laneboard's is reported and left alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from core import procs, removal
from core.errors import LaneboardError
from core.git import WorktreeEntry, worktree_list
from core.leases import LeaseKind, LeaseStore
from core.ledger import Ledger
from core.models import Actor, Task, TaskState
from core.provision import finish, intent, lock_reason, record_created, rollback
from core.repo import RepoContext
from core.runtime import Runtime
from core.verify import verify_worktree


@dataclass(frozen=True)
class Finding:
    """One disagreement between the ledger and the world.

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


def _by_path(entries: list[WorktreeEntry]) -> dict[str, WorktreeEntry]:
    return {os.path.realpath(e.path): e for e in entries}


def diagnose(
    ctx: RepoContext, ledger: Ledger, *, fix: bool, actor: Actor, runtime: Runtime
) -> list[Finding]:
    """Every finding for one repo, fixing what `fix` allows as it goes."""
    findings: list[Finding] = []
    entries = _by_path(worktree_list(ctx.root))
    tasks = ledger.tasks(ctx.repo.id)
    live_paths = {os.path.realpath(t.worktree_path) for t in tasks if t.live}

    for task in tasks:
        if task.state is TaskState.PROVISIONING:
            findings.append(_interrupted_provisioning(ctx, ledger, task, entries, fix, actor))
        elif task.state is TaskState.DISCARDING:
            findings.append(_interrupted_discard(ctx, ledger, task, fix, actor, runtime))
        elif task.live:
            findings.extend(_live_task(ctx, task, entries))
        elif task.worktree_created_by_us and _leftover(task, entries, live_paths):
            findings.append(
                Finding(
                    "leftover-worktree",
                    f"{task.state.value} task still has its worktree at {task.worktree_path}",
                    task.name,
                    task.id,
                )
            )

    areas = {Path(t.area) for t in tasks} | {ctx.area}
    for path, entry in entries.items():
        if path in live_paths:
            continue
        if any(Path(os.path.realpath(a)) in Path(path).parents for a in areas):
            owner = next((t for t in tasks if os.path.realpath(t.worktree_path) == path), None)
            if owner is not None and not owner.live:
                continue  # reported above as leftover
            findings.append(
                Finding(
                    "unowned-worktree",
                    f"{entry.path} is a worktree in the area that no live task owns; left alone",
                )
            )
    for area in areas:
        if not area.is_dir():
            continue
        for child in sorted(area.iterdir()):
            real = os.path.realpath(child)
            if real not in entries and real not in live_paths:
                findings.append(
                    Finding(
                        "unregistered-dir",
                        f"{child} is in the worktree area but is not a worktree git knows; "
                        "left alone",
                    )
                )
    return findings


def _leftover(task: Task, entries: dict[str, WorktreeEntry], live_paths: set[str]) -> bool:
    """A retired task's worktree that git still lists and no live task has taken over."""
    path = os.path.realpath(task.worktree_path)
    return path in entries and path not in live_paths


def _live_task(ctx: RepoContext, task: Task, entries: dict[str, WorktreeEntry]) -> list[Finding]:
    found: list[Finding] = []
    path = os.path.realpath(task.worktree_path)
    if path not in entries:
        found.append(
            Finding(
                "missing-worktree",
                f"git has no worktree at {task.worktree_path}",
                task.name,
                task.id,
            )
        )
    else:
        verdict = verify_worktree(
            Path(task.worktree_path),
            area=Path(task.area),
            common_dir=ctx.common_dir,
            admin_name=task.admin_name,
            identity=task.identity,
        )
        if not verdict.ok:
            found.append(Finding("verification-failed", str(verdict), task.name, task.id))
    if ctx.git.branch_tip(task.branch) is None:
        found.append(
            Finding("missing-branch", f"branch {task.branch} does not exist", task.name, task.id)
        )
    return found


def _interrupted_discard(
    ctx: RepoContext, ledger: Ledger, task: Task, fix: bool, actor: Actor, runtime: Runtime
) -> Finding:
    """A discard that stopped between its journalled intent and `discarded`: `--fix` finishes
    it (the operator asked for it), re-checking every blocker from disk as discard does."""
    if task.owner_pid is not None and procs.alive(task.owner_pid, task.owner_start):
        return Finding(
            "discard-in-progress", f"process {task.owner_pid} is discarding it", task.name, task.id
        )
    detail = "discarding was interrupted; --fix finishes it (snapshot first, blockers re-checked)"
    if not fix:
        return Finding("interrupted-discard", detail, task.name, task.id)
    store = LeaseStore(ledger.database, ctx.settings.lanes.slots)
    try:
        with ctx.lane(ledger, None, LeaseKind.REMOVE, ["laneboard", "doctor", "--fix"]):
            removal.complete(ctx, ledger, task, runtime=runtime, store=store, actor=actor)
    except LaneboardError as err:
        reasons = "; ".join([str(err), *err.details])
        return Finding(
            "interrupted-discard", detail, task.name, task.id, fixed=f"not fixed: {reasons}"
        )
    return Finding("interrupted-discard", detail, task.name, task.id, fixed="finished")


def _interrupted_provisioning(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    entries: dict[str, WorktreeEntry],
    fix: bool,
    actor: Actor,
) -> Finding:
    if task.owner_pid is not None and procs.alive(task.owner_pid, task.owner_start):
        return Finding(
            "provisioning-in-progress",
            f"process {task.owner_pid} is still provisioning it",
            task.name,
            task.id,
        )
    entry = entries.get(os.path.realpath(task.worktree_path))
    ours = entry is not None and (
        task.worktree_created_by_us or entry.locked == lock_reason(task.id)
    )
    if ours and entry is not None and entry.branch == task.branch:
        detail = "provisioning was interrupted after the worktree was created; --fix finishes it"
        if not fix:
            return Finding("interrupted-provisioning", detail, task.name, task.id)
        if not task.worktree_created_by_us:
            # The lock carries this task's id and `worktree add -b` refuses an existing branch,
            # so both the worktree and the branch were created by this task.
            start = intent(ledger, task).get("start_sha", task.base_sha)
            task = record_created(ledger, task, actor, start, recovered=True)
        try:
            finish(ctx, ledger, task, actor, setup_is_ours=False)
        except LaneboardError as err:
            return Finding(
                "interrupted-provisioning", detail, task.name, task.id, fixed=f"not fixed: {err}"
            )
        return Finding("interrupted-provisioning", detail, task.name, task.id, fixed="finished")

    leftovers: list[str] = []
    if entry is not None:
        leftovers.append(f"a worktree at {entry.path} that laneboard cannot prove it created")
    elif os.path.lexists(task.worktree_path):
        leftovers.append(f"a directory at {task.worktree_path} that is not a worktree")
    if ctx.git.branch_tip(task.branch) is not None and not task.branch_created_by_us:
        leftovers.append(f"branch {task.branch} that laneboard cannot prove it created")
    detail = "provisioning was interrupted before the worktree was created"
    if leftovers:
        detail += "; found " + " and ".join(leftovers) + ", left alone"
    if not fix:
        return Finding(
            "interrupted-provisioning", detail + "; --fix marks it failed", task.name, task.id
        )
    rollback(ctx, ledger, task, reason="interrupted: " + detail, actor=actor, force=False)
    return Finding("interrupted-provisioning", detail, task.name, task.id, fixed="marked failed")
