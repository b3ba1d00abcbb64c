"""Integrating reviewed SHAs into a target (DESIGN.md section 7), the steps finalize and the
merge queue share: the refusals (`plan`), then `Integration`, in this order, each step
journalled:

1. (the caller) the intent (reviewed SHA, target and its tip, strategy, scratch path) makes this
   process the task's owner (`finalizing`);
2. under the repo's integration lane (it conflicts with the root lane and other integrations
   only, so task lane commands go on meanwhile): the result is computed against the target's
   tip: a merge commit or a squash commit on the tree `git merge-tree --write-tree` gives (no
   checkout), or a rebase replayed in a scratch worktree; a conflict stops here, target and
   root untouched. The result (`finalize.result`) is journalled before anything can point at it;
3. with a gate command, the result is checked out in the scratch worktree (detached, locked,
   pinned and verified like a task's) and the gate runs there as the integration lease's
   command; a failure stops here;
4. under a root lease nested in the integration lease: the scratch worktree is removed, then
   the target moves by compare-and-swap (`update-ref <new> <old>`), or, when the root has it
   checked out, the clean root is fast-forwarded (`merge --ff-only`). A target that moved
   meanwhile makes the whole computation run once more from its new tip, else it stops;
5. the anchor `refs/laneboard/finalized/<task id>` keeps the reviewed SHA; the task is
   `finalized` (its worktree is removed afterwards, by the cleanup policy, by the caller).

A stop returns the task to `ready_for_review` with the reason journalled. `settle` finishes or
undoes an interrupted integration from the journal and the disk (`doctor --fix`): the target at
(or past) the journalled result means it landed; anything else means it did not.

Length: this module is longer than the ~400 lines the others keep to, on purpose: the plan and its
refusals, then the integration as one ordered sequence of journalled, resumable steps ending in
the compare-and-swap of the target, read in one place so that the order is checked where it is
written.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

from laneboard.core.adapters import faults, history, vault
from laneboard.core.adapters.config import state_dir
from laneboard.core.adapters.git import run_git, symbolic_target
from laneboard.core.adapters.integrate import (
    ZERO,
    RebaseConflict,
    commit_tree,
    fast_forward,
    identity,
    rebase_onto,
    root_dirty,
    scratch_add,
    scratch_remove,
    tree_of,
    update_ref,
)
from laneboard.core.adapters.leases import Held
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.adapters.verify import verify_worktree
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.identity import Identity
from laneboard.core.domain.lanes import LeaseKind
from laneboard.core.domain.lifecycle import check_transition
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import Runtime, agent_processes, pane_of
from laneboard.core.domain.values import value
from laneboard.core.operations.steps import confinement
from laneboard.core.operations.steps.commits import refuse_merges
from laneboard.core.operations.steps.facts import branch_uses, dependents
from laneboard.core.operations.steps.setup import failure, run_logged

STRATEGIES = ("merge", "squash", "rebase")
SCRATCH_PREFIX = ".integrating-"
"""laneboard's scratch worktree of an integration is `<area>/.integrating-<task id>`; no task
name starts with a dot."""
ANCHOR_PREFIX = "refs/laneboard/finalized/"


class Stopped(LaneboardError):
    """Finalize stopped before the target moved: target and root are as they were; the task is
    back in `ready_for_review` with the reason journalled."""

    def __init__(self, message: str, files: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.files = files


def scratch_path(task: Task) -> Path:
    return Path(task.area) / f"{SCRATCH_PREFIX}{task.id}"


def scratch_reason(task: Task) -> str:
    return f"laneboard: integration of task {task.id}"


def anchor(task: Task) -> str:
    return f"{ANCHOR_PREFIX}{task.id}"


@value
class Plan:
    """What one finalize will do, checked before anything changes."""

    task: Task
    target: str
    strategy: str
    reviewed: str
    checkout: str | None
    """The worktree that has the target checked out (the root, or a live task's own worktree:
    a child finalized into its parent's branch): fast-forwarded instead of moving the ref."""
    who: tuple[str, str]


def plan(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    runtime: Runtime,
    *,
    into: str | None,
    strategy: str,
) -> Plan:
    """Every refusal of finalize, before anything changes: not reviewed, the branch moved since
    review, uncommitted work, an agent still running, no target, the target checked out in
    another worktree or in a dirty root, no git identity."""
    confinement.settle(ctx.common_dir, task.id)
    if strategy not in STRATEGIES:
        raise LaneboardError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    reviewed = plan_publish(ctx, task)
    running = agent_processes(runtime, pane_of(task))
    if running:
        raise LaneboardError(
            f"{task.name}: its agent still runs ({', '.join(running)}); pause or retain it first"
        )
    target = (into or task.target or "").removeprefix("refs/heads/")
    if not target:
        raise LaneboardError(f"{task.name} has no target branch: give --into BRANCH")
    if ctx.git.branch_tip(target) is None:
        raise LaneboardError(f"target branch {target!r} does not exist in {ctx.root}")
    alias = symbolic_target(ctx.root, f"refs/heads/{target}")
    if alias is not None:
        raise LaneboardError(
            f"target {target} is a symbolic ref to {alias}; name the branch itself "
            f"(--into {alias.removeprefix('refs/heads/')})"
        )
    if target == task.branch:
        raise LaneboardError(f"{task.name}: cannot integrate branch {target} into itself")
    waiting = dependents(ledger, task)
    if waiting:
        names = ", ".join(f"{t.name} ({t.state.value})" for t in waiting)
        raise LaneboardError(
            f"{task.name}: live task(s) {names} target its branch {task.branch}; what they "
            "land would miss this finalize: finalize or discard them first"
        )
    checkout = target_checkout(ctx, ledger, target)
    if checkout is not None:
        refuse_dirty(checkout, target)
    return Plan(task, target, strategy, reviewed, checkout, identity(ctx.root))


def plan_publish(ctx: RepoContext, task: Task) -> str:
    """The refusals both finalize paths share: the task must be reviewed, its branch still at
    the reviewed SHA, and nothing in its worktree left uncommitted. Returns the reviewed SHA."""
    check_transition(task.state, TaskState.FINALIZING)
    if task.reviewed_sha is None:
        raise LaneboardError(
            f"{task.name} has not been reviewed: `laneboard review {task.name} --mark` pins the "
            "commit finalize integrates"
        )
    ctx.git.refresh()
    tip = ctx.git.branch_tip(task.branch)
    if tip != task.reviewed_sha:
        raise LaneboardError(
            f"{task.name}: branch {task.branch} moved since review: reviewed "
            f"{task.reviewed_sha}, now {tip or 'gone'}; review it again"
        )
    refuse_uncommitted(task)
    return tip


def refuse_uncommitted(task: Task) -> None:
    """Finalize integrates committed work only: uncommitted or untracked files in the task's
    worktree are refused until they are committed (or discarded)."""
    if not Path(task.worktree_path).is_dir():
        return
    changed, untracked = history.pending(Path(task.worktree_path))
    if changed or untracked:
        paths = [p.path for p in changed] + list(untracked)
        more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
        raise LaneboardError(
            f"{task.name} has uncommitted changes ({', '.join(paths[:3])}{more}); finalize "
            "integrates the reviewed commit only: commit them (and review again) or remove them"
        )


def target_checkout(ctx: RepoContext, ledger: Ledger, target: str) -> str | None:
    """The worktree that has `target` checked out: the root, or the worktree of the live task
    whose own branch it is (it verifies as that task's); None when none has. Refused when any
    other worktree has it, or a rebase or bisect works on it anywhere."""
    checkouts, busy = branch_uses(ctx, target)
    if busy:
        raise LaneboardError(f"target branch {target} is in use: {busy[0]}")
    root = os.path.realpath(ctx.root)
    found: str | None = None
    for path in checkouts:
        if os.path.realpath(path) == root:
            found = str(ctx.root)
            continue
        owner = _owning_task(ctx, ledger, target, path)
        if owner is None:
            raise LaneboardError(
                f"target branch {target} is checked out in the worktree {path}; laneboard "
                "does not move a branch under another checkout (switch that worktree away first)"
            )
        found = owner.worktree_path
    return found


def _owning_task(ctx: RepoContext, ledger: Ledger, branch: str, path: str) -> Task | None:
    """The live task of this repo whose worktree is `path` with its own branch `branch`
    checked out, verified as that task's; else None."""
    real = os.path.realpath(path)
    for task in ledger.tasks(ctx.repo.id, include_retired=False):
        if task.branch == branch and os.path.realpath(task.worktree_path) == real:
            return task if ctx.verify(task).ok else None
    return None


def refuse_dirty(checkout: str, target: str) -> None:
    dirty = root_dirty(Path(checkout))
    if dirty:
        shown = ", ".join(dirty[:3]) + (f" and {len(dirty) - 3} more" if len(dirty) > 3 else "")
        raise LaneboardError(
            f"{checkout} has {target} checked out with uncommitted changes ({shown}); "
            "laneboard never stashes, resets or switches a checkout: commit or stash them"
        )


# --- the run -------------------------------------------------------------------------------


@value(frozen=False)
class Integration:
    """One finalize in progress, on the terms of its plan."""

    ctx: RepoContext
    ledger: Ledger
    task: Task
    chosen: Plan
    actor: Actor
    held: Held | None = None
    pinned: Identity | None = None
    """The scratch worktree's identity, once it exists."""
    label: str | None = None
    """The reflog message of the target's move (a queue's batch names its tasks)."""

    def journal(self, kind: str, data: dict[str, Any]) -> None:
        self.ledger.append_event(self.task.id, self.ctx.repo.id, kind, self.actor, data)

    def attempts(self) -> tuple[str, str]:
        """Compute, gate and move, once more from the new tip if the target moved meanwhile.
        Returns the target's (old, new) tips."""
        for attempt in (1, 2):
            self.ctx.git.refresh()
            old = self.ctx.git.branch_tip(self.chosen.target)
            assert old is not None
            new = self.compute(old)
            self.journal("finalize.result", {"old": old, "new": new, "attempt": attempt})
            faults.checkpoint("finalize.after_result")
            if self.ctx.settings.gate:
                self.gate(new)
            if self.move(old, new):
                return old, new
            self.journal("finalize.target_moved", {"expected": old, "attempt": attempt})
        raise Stopped(
            f"target {self.chosen.target} moved twice while {self.task.name} was being "
            "integrated; nothing was changed, finalize again"
        )

    # --- the result --------------------------------------------------------------------------

    def compute(self, old: str) -> str:
        """The commit the target will point at, built on `old`."""
        root, reviewed = self.ctx.root, self.chosen.reviewed
        if self.ctx.git.is_ancestor(reviewed, old):
            return old  # already in the target: nothing to integrate
        tree, check = history.merge(root, old, reviewed)
        if tree is None:
            if check.problem:
                raise Stopped(f"{self.task.name} cannot be merged: {check.problem}")
            raise Stopped(
                f"{self.task.name} conflicts with {self.chosen.target} in "
                f"{', '.join(check.files)}; target and root are untouched",
                check.files,
            )
        strategy, who = self.chosen.strategy, self.chosen.who
        if strategy == "merge":
            message = (
                f"Merge {self.task.branch} into {self.chosen.target}\n\n"
                f"laneboard task {self.task.name} ({self.task.id}), reviewed {reviewed}\n"
            )
            return commit_tree(root, tree, [old, reviewed], message, who)
        if strategy == "squash":
            if tree == tree_of(root, old):
                return old
            base = history.merge_base(root, old, reviewed) or old
            listed = history.commits(root, base, reviewed)
            lines = "".join(f"  {c.sha[:12]} {c.subject}\n" for c in listed)
            message = (
                f"{self.task.name}: {listed[0].subject if len(listed) == 1 else 'squashed work'}"
                f"\n\nSquash of {len(listed)} commits of {self.task.branch} (laneboard task "
                f"{self.task.id}, reviewed {reviewed}):\n{lines}"
            )
            return commit_tree(root, tree, [old], message, who)
        if self.ctx.git.is_ancestor(old, reviewed):
            return reviewed  # a rebase onto its own base is the branch itself
        base = history.merge_base(root, old, reviewed) or old
        try:
            refuse_merges(self.ctx, self.task, old, reviewed)
        except LaneboardError as err:
            raise Stopped(str(err)) from None
        self.make_scratch(old)
        try:
            rebased = rebase_onto(scratch_path(self.task), old, base, reviewed, who)
        except RebaseConflict as conflict:
            raise Stopped(
                f"{self.task.name} conflicts with {self.chosen.target} when rebased, in "
                f"{', '.join(conflict.files)}; target and root are untouched",
                tuple(conflict.files),
            ) from None
        if tree_of(root, rebased) != tree:
            # Replaying commit by commit resolved something differently from merging the
            # reviewed tip: it would not land exactly the reviewed content.
            raise Stopped(
                f"{self.task.name}: rebased onto {self.chosen.target}, its commits do not add up "
                "to the reviewed content merged into the target; use --strategy merge or squash"
            )
        return rebased

    # --- the scratch worktree and the gate ------------------------------------------------------

    def make_scratch(self, sha: str) -> None:
        """laneboard's own detached worktree at `sha` (created under a root lease nested in the
        integration lease: it writes shared git metadata), pinned like a task's."""
        path = scratch_path(self.task)
        if self.pinned is not None:
            self.verified_scratch()
            return
        assert self.held is not None
        with self.ctx.lane(
            self.ledger,
            None,
            LeaseKind.INTEGRATE,
            ["git", "worktree", "add", str(path)],
            parent=self.held,
        ):
            if os.path.lexists(path):
                raise Stopped(f"{path} already exists; laneboard never reuses a directory")
            scratch_add(self.ctx.root, path, sha, scratch_reason(self.task))
        seen = verify_worktree(
            path,
            area=Path(self.task.area),
            common_dir=self.ctx.common_dir,
            admin_name=None,
            identity=None,
        )
        if not seen.ok or seen.identity is None:
            raise Stopped(f"the scratch worktree {path} does not verify: {seen}")
        self.pinned = seen.identity
        self.journal(
            "scratch.created",
            {
                "path": str(path),
                "sha": sha,
                "admin_name": seen.admin_name,
                "identity": seen.identity.as_dict(),
            },
        )
        faults.checkpoint("finalize.after_scratch")

    def verified_scratch(self) -> Path:
        path = scratch_path(self.task)
        seen = verify_worktree(
            path,
            area=Path(self.task.area),
            common_dir=self.ctx.common_dir,
            admin_name=None,
            identity=self.pinned,
        )
        if not seen.ok:
            raise Stopped(f"the scratch worktree {path} changed under laneboard: {seen}")
        return path

    def gate(self, new: str) -> None:
        """Run the gate command on the result; a non-zero exit stops the finalize."""
        data = self.gate_run(new)
        if data["exit_code"] != 0:
            raise Stopped(f"{self.task.name}: the gate command {failure(data)}")

    def gate_run(self, new: str) -> dict[str, Any]:
        """Run the gate command on `new`, in the scratch worktree (made at `new`, or moved to
        it), as the integration lease's command, journalled (`gate.passed`, `gate.failed`).
        Returns what the journal keeps: the exit code, the output's tail, the log's path."""
        gate = self.ctx.settings.gate
        assert gate and self.held is not None
        if self.pinned is None:
            self.make_scratch(new)
        else:
            path = self.verified_scratch()
            head = run_git(["rev-parse", "HEAD"], cwd=path).stdout.decode().strip()
            if head != new:
                run_git(["checkout", "--detach", "--quiet", new], cwd=path, read=False)
        argv = ["/bin/sh", "-c", gate] if isinstance(gate, str) else list(gate)
        # One log per run: a queue's bisection gates several results within a second.
        log = state_dir() / "logs" / self.task.id / f"gate-{time.time_ns()}-{new[:12]}.log"
        self.journal("gate.started", {"command": argv, "sha": new, "log": str(log)})
        where = self.verified_scratch()
        admin = _admin_of(self.ctx, where)
        if admin is None:
            raise Stopped(f"the scratch worktree {where} has no admin dir of its own")
        # The gate runs the task's code: confined to the scratch worktree, its objects thrown
        # away with it.
        objects = state_dir() / "objects" / f"gate-{self.task.id}"
        box = confinement.sandbox(
            self.ctx.settings.confine.mode,
            self.ledger.database,
            common_dir=self.ctx.common_dir,
            worktree=where,
            admin_name=admin.name,
            task_id=None,
            task_name=self.task.name,
            branch=None,
            channel=None,
            objects=objects,
        )
        if box.decision.refused:
            raise Stopped(f"{self.task.name}: the gate was not run: {box.decision.note}")
        began = time.monotonic()
        try:
            data = run_logged(
                self.ctx, self.task, self.held, argv, where, log, "gate command",
                leftovers=True, box=box,
            )  # fmt: skip
        finally:
            shutil.rmtree(objects, ignore_errors=True)
        data["sha"] = new
        data["seconds"] = round(time.monotonic() - began, 3)
        faults.checkpoint("finalize.after_gate")
        self.journal("gate.passed" if data["exit_code"] == 0 else "gate.failed", data)
        return data

    def remove_scratch(self) -> None:
        """Remove the scratch worktree, only once it verifies as the one laneboard made (or,
        when its directory is gone, its registration carries this task's lock)."""
        if self.pinned is None and not scratch_left(self.ctx, self.task):
            return
        drop_scratch(self.ctx, self.task, self.pinned)
        self.pinned = None
        self.journal("scratch.removed", {"path": str(scratch_path(self.task))})

    # --- moving the target -----------------------------------------------------------------------

    def move(self, old: str, new: str) -> bool:
        """Under a root lease nested in the integration lease: remove the scratch worktree and
        move the target from `old` to `new`. False when the target is no longer at `old`."""
        assert self.held is not None
        target = self.chosen.target
        with self.ctx.lane(
            self.ledger,
            None,
            LeaseKind.INTEGRATE,
            ["laneboard", "finalize", self.task.name, "--move", target],
            parent=self.held,
        ):
            self.remove_scratch()
            if new == old:
                return True
            try:
                checkout = target_checkout(self.ctx, self.ledger, target)
                if checkout is not None:
                    refuse_dirty(checkout, target)
            except LaneboardError as err:
                raise Stopped(str(err)) from None
            if checkout is not None:
                owner = _owning_task(self.ctx, self.ledger, target, checkout)
                merge = None
                if owner is not None:  # a task's checkout: git runs in its sandbox

                    def merge(args: list[str]) -> subprocess.CompletedProcess[bytes]:
                        assert owner is not None
                        return confinement.git_in_task(
                            self.ctx.settings.confine.mode,
                            self.ledger.database,
                            self.ctx.common_dir,
                            self.ctx.repo.id,
                            owner,
                            args,
                        )

                problem = fast_forward(Path(checkout), old, new, merge)
                if problem is None:
                    return True
                self.ctx.git.refresh()
                if self.ctx.git.branch_tip(target) != old:
                    return False
                raise Stopped(f"{checkout} could not be fast-forwarded to the result ({problem})")
            message = self.label or f"laneboard: finalize {self.task.name} ({self.task.id})"
            problem = update_ref(self.ctx.root, f"refs/heads/{target}", new, old, message)
            if problem is None:
                return True
            self.ctx.git.refresh()
            if self.ctx.git.branch_tip(target) != old:
                return False
            raise Stopped(f"target {target} could not be moved: {problem}")

    def finish(self, moved: tuple[str, str]) -> Task:
        old, new = moved
        self.journal("target.moved", {"target": self.chosen.target, "old": old, "new": new})
        faults.checkpoint("finalize.after_move")
        return land(self.ctx, self.ledger, self.task, self.actor, old, new)

    def drop_own_scratch(self) -> None:
        """Remove the scratch worktree if one is left, under a root lease nested in the
        integration lease (outside a `move`, which holds one already)."""
        if self.pinned is not None or scratch_left(self.ctx, self.task):
            with self.ctx.lane(
                self.ledger,
                None,
                LeaseKind.INTEGRATE,
                ["git", "worktree", "remove"],
                parent=self.held,
            ):
                self.remove_scratch()

    def stop(self, stop: Stopped) -> None:
        """Put things back after a stop: the scratch worktree goes, the task returns to
        review with the reason (and conflicting files) journalled."""
        kept = None
        try:
            self.drop_own_scratch()
        except LaneboardError as err:
            kept = f"{err}; remove it yourself before the next finalize"
            stop.details.append(f"the scratch worktree stays: {kept}")
        self.ledger.update_task(
            self.task.id,
            actor=self.actor,
            kind="finalize.stopped",
            state=TaskState.READY_FOR_REVIEW,
            settled=True,
            data={"reason": str(stop), "files": list(stop.files), "scratch_kept": kept},
        )


def land(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, old: str, new: str) -> Task:
    """The target is at `new`: keep the anchor and mark the task finalized (idempotent)."""
    reviewed = task.reviewed_sha
    assert reviewed is not None
    ref = anchor(task)
    if ctx.git.ref_target(ref) != reviewed:
        problem = update_ref(ctx.root, ref, reviewed, ZERO, f"laneboard: finalized {task.id}")
        if problem is not None:
            raise LaneboardError(f"the anchor {ref} could not be written: {problem}")
    vault.keep_ref(ctx.repo.id, ctx.common_dir, reviewed, ref)
    faults.checkpoint("finalize.after_anchor")
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="task.finalized",
        state=TaskState.FINALIZED,
        expect=TaskState.FINALIZING,
        settled=True,
        keep_live=True,
        data={"anchor": ref, "target_old": old, "target_new": new},
        finalized_sha=reviewed,
        target_old=old,
        target_new=new,
    )


# --- after a crash -------------------------------------------------------------------------------


def settle(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, *, reason: str) -> Task:
    """Finish or undo a finalize that stopped half-way (this process owns the task): the scratch
    worktree goes (only when it verifies as laneboard's), then, if the target is at the
    journalled result, it landed and the task is finalized; otherwise it did not, and the task is
    back in review. Must run where a root lease may be taken."""
    intent = ledger.last_event(task.id, "finalize.intent")
    if intent is None or intent.data.get("mode") != "merge":
        raise LaneboardError(f"task {task.name} has no finalize intent in the journal")
    scratch = next(
        (e for e in reversed(ledger.events(task.id)) if e.kind == "scratch.created"), None
    )
    pinned = None
    if scratch is not None and scratch.seq > intent.seq:
        pinned = Identity(**scratch.data["identity"])
    if scratch_left(ctx, task):
        with ctx.lane(ledger, None, LeaseKind.INTEGRATE, ["git", "worktree", "remove"]):
            drop_scratch(ctx, task, pinned)
        ledger.append_event(
            task.id, ctx.repo.id, "scratch.removed", actor, {"path": str(scratch_path(task))}
        )
    results = [
        e for e in ledger.events(task.id) if e.kind == "finalize.result" and e.seq > intent.seq
    ]
    ctx.git.refresh()
    now = ctx.git.branch_tip(intent.data["target"])
    for result in reversed(results):
        if now is not None and ctx.git.is_ancestor(result.data["new"], now):
            ledger.append_event(
                task.id,
                ctx.repo.id,
                "target.moved",
                actor,
                {
                    "target": intent.data["target"],
                    "old": result.data["old"],
                    "new": result.data["new"],
                    "found": True,
                },
            )
            return land(ctx, ledger, task, actor, result.data["old"], result.data["new"])
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="finalize.undone",
        state=TaskState.READY_FOR_REVIEW,
        settled=True,
        data={"reason": reason, "target": intent.data["target"], "target_now": now},
    )


def scratch_left(ctx: RepoContext, task: Task) -> bool:
    """The task's scratch worktree is there: its directory, or git's registration of it."""
    path = scratch_path(task)
    return os.path.lexists(path) or _admin_of(ctx, path) is not None


def _admin_of(ctx: RepoContext, path: Path) -> Path | None:
    """The scratch worktree's admin dir under `<common>/worktrees/`: one git named after the
    scratch directory (`.integrating-<task id>`, maybe with a number) whose `gitdir` names
    `path`'s `.git`. Never another admin dir, whatever its files say: a task may write its own
    admin dir's `gitdir` and `locked`, so those alone prove nothing."""
    want = os.path.join(os.path.abspath(path), ".git")
    stem = path.name.lstrip(".")  # git makes a leading dot of the name a dash
    for admin in sorted((ctx.common_dir / "worktrees").glob("*")):
        name = admin.name.lstrip(".-")
        ours = name == stem or (name.startswith(stem) and name[len(stem) :].isdigit())
        if ours and _read(admin / "gitdir") == want:
            return admin
    return None


def drop_scratch(ctx: RepoContext, task: Task, pinned: Identity | None) -> None:
    """Remove the task's scratch worktree: a directory only when it verifies (against `pinned`,
    or, before it was pinned, by carrying this task's lock reason); a registration whose
    directory is gone (a gate deleted it) only when it carries this task's lock reason.
    Anything else is left alone and refused. Must run under a root lease."""
    path = scratch_path(task)
    registered = _admin_of(ctx, path)
    ours = registered is not None and _read(registered / "locked") == scratch_reason(task)
    if _emptied(path, pinned) and (pinned is not None or ours):
        # A confined gate can empty its scratch worktree but not remove the directory (its
        # sandbox's mount point): what is left is the pinned directory, empty. Nothing of
        # anyone's is in it; its registration is proven below, as for one deleted outright.
        os.rmdir(path)
    if os.path.lexists(path):
        seen = verify_worktree(
            path,
            area=Path(task.area),
            common_dir=ctx.common_dir,
            admin_name=None,
            identity=pinned,
        )
        lock = ctx.common_dir / "worktrees" / (seen.admin_name or "?") / "locked"
        if not seen.ok or (pinned is None and _read(lock) != scratch_reason(task)):
            raise LaneboardError(
                f"{path} is not the scratch worktree laneboard made ({seen}); left alone"
            )
    else:
        admin = _admin_of(ctx, path)
        if admin is None:
            return
        if _read(admin / "locked") != scratch_reason(task):
            raise LaneboardError(f"{admin} is not laneboard's scratch registration; left alone")
    scratch_remove(ctx.root, path)


def _emptied(path: Path, pinned: Identity | None) -> bool:
    """`path` is a real, empty directory: the pinned scratch directory, when it was pinned."""
    try:
        info = path.lstat()
        empty = stat.S_ISDIR(info.st_mode) and not os.listdir(path)
    except OSError:
        return False
    if pinned is not None and (info.st_dev, info.st_ino) != (pinned.dir_dev, pinned.dir_ino):
        return False
    return empty


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        return None
