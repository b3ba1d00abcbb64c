"""Reconciliation of the ledger with git (and, once the runtime exists, tmux).

Reports what disagrees: tasks whose worktree or branch is missing, worktrees in an area that no
task owns (shown as unowned, never deleted), changes interrupted by a crash. With `fix`, it
finishes or undoes only what exactly matches the intent recorded in the ledger; anything it cannot
prove is laneboard's is reported and left alone.

Length: about 500 lines, one finding kind per thing that can be left half-done, because doctor is
the one module that reconciles every operation (it may call them all; nothing calls it).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from laneboard.core.adapters import confine, locks, procs, taskobjects, vault
from laneboard.core.adapters.config import state_dir
from laneboard.core.adapters.git import WorktreeEntry, run_git, worktree_list
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.mergequeue import QueueStore
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import LeaseKind
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.queue import EntryState
from laneboard.core.domain.runtime import Runtime, pane_of, same_pane
from laneboard.core.domain.views import Finding
from laneboard.core.operations import cancel, publish, queue
from laneboard.core.operations import discard as removal
from laneboard.core.operations.steps import integration
from laneboard.core.operations.steps.cancelling import NOT_STARTED, cancel_requested
from laneboard.core.operations.steps.facts import moved_checkout
from laneboard.core.operations.steps.recovery import by_path, interrupted_provisioning
from laneboard.core.operations.steps.stopping import unrecorded_panes
from laneboard.core.operations.steps.undo import undo_cancel


def diagnose(ctx: RepoContext, ledger: Ledger, *, fix: bool, runtime: Runtime) -> list[Finding]:
    """Every finding for one repo, fixing what `fix` allows as it goes (journalled with actor
    `doctor`)."""
    findings: list[Finding] = []
    entries = by_path(worktree_list(ctx.root))
    tasks = ledger.tasks(ctx.repo.id)
    live_paths = {os.path.realpath(t.worktree_path) for t in tasks if t.live}
    for task in tasks:  # a discard in progress keeps its worktree under a quarantine name
        if task.state is TaskState.FINALIZING:  # and a finalize its scratch worktree
            live_paths.add(os.path.realpath(integration.scratch_path(task)))
        if task.state is TaskState.DISCARDING:
            intent_event = ledger.last_event(task.id, "discard.intent")
            if intent_event is not None and intent_event.data.get("quarantine"):
                live_paths.add(os.path.realpath(intent_event.data["quarantine"]))
            removing = ledger.last_event(task.id, "worktree.removing")
            if removing is not None and removing.data.get("detached"):  # renamed, then a crash
                live_paths.add(os.path.realpath(removing.data["detached"]))

    for task in tasks:
        try:
            findings.extend(_task_findings(ctx, ledger, task, entries, live_paths, fix, runtime))
        except Exception as err:  # noqa: BLE001 - one broken task must not hide the others
            # The report on every other task still matters more than this one's traceback.
            findings.append(
                Finding("check-failed", f"could not check it: {err}", task.name, task.id)
            )

    findings.extend(_pane_findings(ledger, tasks, runtime, fix))
    findings.extend(_queue_findings(ctx, ledger, fix))
    findings.extend(_confinement_findings(ctx, tasks))
    findings.extend(_vault_findings(ctx, ledger, tasks, fix))
    findings.extend(_object_findings(ctx, tasks, fix))
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


def _queue_findings(ctx: RepoContext, ledger: Ledger, fix: bool) -> list[Finding]:
    """Merge queue entries whose batch ended without them (a crash; the tasks were settled
    above): `--fix` puts them back in line, or marks them landed when their task landed."""
    store = QueueStore(ledger.database)
    stale = [
        entry
        for entry in store.active(ctx.repo.id)
        if entry.state is EntryState.TESTING
        and ledger.task(entry.task_id).state is not TaskState.FINALIZING
    ]
    if not stale:
        return []
    if fix:
        queue.reconcile(ledger, store, ctx.repo.id, Actor.DOCTOR)
    found = []
    for entry in stale:
        task = ledger.task(entry.task_id)
        after = store.last_of_task(task.id)
        fixed = f"now {after.state.value}" if fix and after is not None else None
        found.append(
            Finding(
                "interrupted-queue",
                f"its merge queue batch ended without it ({task.state.value}); --fix puts it "
                "back in line, or marks it landed",
                task.name,
                task.id,
                fixed=fixed,
            )
        )
    return found


def _confinement_findings(ctx: RepoContext, tasks: list[Task]) -> list[Finding]:
    """Confinement the policy asks for but this machine cannot give, and each running agent
    that was started unconfined (DESIGN.md section 5a: never silently absent)."""

    found: list[Finding] = []
    if ctx.settings.confine.mode != "off":
        probe = confine.probe(state_dir())
        if not probe.works:
            found.append(Finding("confinement-unavailable", probe.reason or "bwrap does not work"))
    if ctx.settings.confine.mode != "off":
        for gap in confine.gaps():
            found.append(Finding("confinement-gap", gap))
    for task in tasks:
        if task.state is TaskState.RUNNING and task.confined is False:
            note = task.confine_note or "not recorded why"
            found.append(
                Finding("unconfined", f"its agent runs unconfined: {note}", task.name, task.id)
            )
    return found


def _object_findings(ctx: RepoContext, tasks: list[Task], fix: bool) -> list[Finding]:
    """Objects a task's git wrote in its sandbox that are not in the common store yet (its
    warden was killed before it moved them): moved, verified, with `fix`."""

    found: list[Finding] = []
    common = ctx.common_dir / "objects"
    for task in tasks:
        own = taskobjects.directory(state_dir(), task.id)
        waiting = taskobjects.pending(own, common)
        if not waiting:
            continue
        fixed = None
        if fix:
            done = taskobjects.move(own, common)
            fixed = f"moved {done.objects}" + (
                f"; refused {len(done.refused or ())} that are not what their names say"
                if done.refused
                else ""
            )
        detail = f"{waiting} objects its git wrote are not in the repository's store yet"
        found.append(Finding("objects-unmoved", detail, task.name, task.id, fixed))
    return found


def kept_refs(ledger: Ledger, task: Task) -> list[tuple[str, str]]:
    """(ref, sha) of everything laneboard keeps of `task` in the vault and mirrors in the
    repository: its snapshots, its finalize anchor, the tips its rebases kept."""
    found = [(ref, sha) for _n, ref, sha in ledger.snapshots(task.id)]
    if task.finalized_sha and task.state is not TaskState.FINALIZING:
        found.append((integration.anchor(task), task.finalized_sha))
    for event in ledger.events(task.id):
        if event.kind == "rebase.kept" and event.data.get("ref") and event.data.get("sha"):
            found.append((str(event.data["ref"]), str(event.data["sha"])))
    return found


def _vault_findings(
    ctx: RepoContext, ledger: Ledger, tasks: list[Task], fix: bool
) -> list[Finding]:
    """Every snapshot, anchor and kept tip the ledger records, checked against the vault and
    the repository's mirror ref: a mirror ref that is gone or moved is put back from the
    vault, and one the vault lacks is copied there (with `fix`); one neither holds is lost,
    and said so."""

    found: list[Finding] = []
    held = vault.path(state_dir(), ctx.repo.id)
    for task in tasks:
        for ref, sha in kept_refs(ledger, task):
            in_vault = vault.held(held, ref) == sha
            in_repo = ctx.git.ref_target(ref) == sha
            if in_vault and in_repo:
                continue
            if not in_vault and not in_repo:
                found.append(
                    Finding(
                        "kept-lost",
                        f"{ref} ({sha[:12]}) is in neither the vault nor the repository",
                        task.name,
                        task.id,
                        "not fixed: nothing holds it" if fix else None,
                    )
                )
                continue
            kind = "vault-missing" if in_repo else "kept-ref-missing"
            where = "the vault lacks it" if in_repo else "the repository lost its ref"
            fixed = None
            if fix:
                try:
                    if in_repo:
                        vault.keep(held, ctx.common_dir, sha, ref)
                    else:
                        vault.bring_back(held, ctx.common_dir, sha, ref)
                    fixed = "copied into the vault" if in_repo else "put back from the vault"
                except LaneboardError as err:
                    fixed = f"not fixed: {err}"
            found.append(Finding(kind, f"{ref} ({sha[:12]}): {where}", task.name, task.id, fixed))
    return found


def _pane_findings(ledger: Ledger, tasks: list[Task], runtime: Runtime, fix: bool) -> list[Finding]:
    """Panes against the ledger: an agent still running for a retired task (`--fix` stops
    it), a running task whose pane is gone (`laneboard resume` brings it back), and a recorded
    pane id that now names someone else's pane (`--fix` forgets it, so nothing is ever sent
    there)."""
    found: list[Finding] = []
    with locks.held("agents"):  # never while another process is between launch and ledger
        everything = runtime.snapshot()
        strays = [(task, stray) for task in tasks for stray in unrecorded_panes(everything, task)]
        for task, stray in strays:
            detail = f"pane {stray.ref.pane_id} runs an agent for it the ledger does not record"
            if fix:
                runtime.stop(stray.ref, timeout=5.0)
                ledger.append_event(
                    task.id, task.repo_id, "doctor.pane_stopped", Actor.DOCTOR,
                    {"pane": stray.ref.pane_id, "unrecorded": True},
                )  # fmt: skip
                found.append(
                    Finding("unrecorded-pane", detail, task.name, task.id, fixed="stopped")
                )
            else:
                found.append(
                    Finding("unrecorded-pane", detail + "; --fix stops it", task.name, task.id)
                )
    # Panes on another tmux server than this one cannot be judged from here: left alone.
    with_pane = [t for t in tasks if t.tmux_pane and t.tmux_socket == runtime.socket_path]
    if not with_pane:
        return found
    panes = everything
    for task in with_pane:
        recorded = pane_of(task)
        assert recorded is not None
        seen = panes.get(recorded.pane_id)
        ours = seen is not None and same_pane(recorded, seen)
        if not task.live and ours and seen is not None and seen.alive:
            detail = f"pane {recorded.pane_id} still runs an agent for this {task.state.value} task"
            if fix:
                stopped = runtime.stop(recorded, timeout=5.0)
                ledger.append_event(
                    task.id, task.repo_id, "doctor.pane_stopped", Actor.DOCTOR,
                    {"pane": recorded.pane_id, "stopped": stopped.stopped},
                )  # fmt: skip
                found.append(Finding("orphan-pane", detail, task.name, task.id, fixed="stopped"))
            else:
                found.append(
                    Finding("orphan-pane", detail + "; --fix stops it", task.name, task.id)
                )
        elif task.live and seen is not None and not ours:
            detail = f"pane {recorded.pane_id} is now someone else's pane (a new tmux server)"
            if fix:
                ledger.update_task(
                    task.id, actor=Actor.DOCTOR, kind="doctor.pane_forgotten",
                    data={"pane": recorded.pane_id},
                    tmux_pane=None, tmux_window=None, tmux_session=None, tmux_server_pid=None,
                )  # fmt: skip
                found.append(Finding("pane-mismatch", detail, task.name, task.id, fixed="forgot"))
            else:
                found.append(
                    Finding("pane-mismatch", detail + "; --fix forgets it", task.name, task.id)
                )
        elif task.state is TaskState.RUNNING and seen is None:
            found.append(
                Finding(
                    "runtime-lost",
                    f"its pane {recorded.pane_id} is gone; `laneboard resume {task.name}` "
                    "continues its conversation",
                    task.name,
                    task.id,
                )
            )
    return found


def _task_findings(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    entries: dict[str, WorktreeEntry],
    live_paths: set[str],
    fix: bool,
    runtime: Runtime,
) -> list[Finding]:
    actor = Actor.DOCTOR
    if task.state is TaskState.PROVISIONING:
        return [interrupted_provisioning(ctx, ledger, task, entries, fix, actor, runtime)]
    if task.state is TaskState.DISCARDING:
        return [_interrupted_discard(ctx, ledger, task, fix, actor, runtime)]
    if task.state is TaskState.FINALIZING:
        return [_interrupted_finalize(ctx, ledger, task, fix, actor)]
    if task.state is TaskState.CANCELLING:
        return [_interrupted_cancel(ctx, ledger, task, fix, actor)]
    if task.state in NOT_STARTED and cancel_requested(ledger, task.id):
        return [_unanswered_cancel(ctx, ledger, task, fix, actor, runtime)]
    if task.live:
        return _live_task(ctx, ledger, task, entries, live_paths, fix)
    if _leftover(task, entries, live_paths):
        where = task.worktree_path
        return [
            Finding(
                "leftover-worktree",
                f"{task.state.value} task still has a worktree at {where}; left alone",
                task.name,
                task.id,
            )
        ]
    return []


def _leftover(task: Task, entries: dict[str, WorktreeEntry], live_paths: set[str]) -> bool:
    """A retired task's worktree that git still lists and no live task has taken over."""
    path = os.path.realpath(task.worktree_path)
    return path in entries and path not in live_paths


def _live_task(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    entries: dict[str, WorktreeEntry],
    live_paths: set[str],
    fix: bool,
) -> list[Finding]:
    found: list[Finding] = []
    path = os.path.realpath(task.worktree_path)
    gone = not os.path.lexists(task.worktree_path)
    moved = moved_checkout(ctx, task) if gone else None
    if moved is not None:
        live_paths.add(os.path.realpath(moved))  # not an unregistered directory: the task's
        detail = (
            f"{task.worktree_path} was moved to {moved}; --fix registers it there (`discard` "
            "refuses meanwhile: its checkout still uses the task's admin dir)"
        )
        fixed = _register_moved(ctx, ledger, task, moved) if fix else None
        found.append(Finding("moved-worktree", detail, task.name, task.id, fixed))
    elif gone or path not in entries:
        what = "is gone" if gone else "is not a worktree git knows"
        found.append(
            Finding(
                "missing-worktree",
                f"{task.worktree_path} {what}; `laneboard discard {task.name}` ends the task, "
                "saving what its branch still holds",
                task.name,
                task.id,
            )
        )
    else:
        verdict = ctx.verify(task)
        if not verdict.ok:
            found.append(Finding("verification-failed", str(verdict), task.name, task.id))
    if ctx.git.branch_tip(task.branch) is None:
        found.append(
            Finding("missing-branch", f"branch {task.branch} does not exist", task.name, task.id)
        )
    return found


def _register_moved(ctx: RepoContext, ledger: Ledger, task: Task, place: Path) -> str:
    """Take a checkout moved by hand as the task's worktree where it is now: only the directory
    laneboard pinned (a move keeps its inode), only inside the task's worktree area (where
    verification looks), under the root lane; git's links repaired for that one path
    (`git worktree repair <path>`), verified, then the ledger's path updated (`task.moved`)."""
    identity = task.identity
    info = place.lstat()
    if identity is None or (info.st_dev, info.st_ino) != (identity.dir_dev, identity.dir_ino):
        return f"not fixed: {place} is not the directory laneboard created for it"
    area = Path(task.area)
    if Path(os.path.realpath(area)) not in Path(os.path.realpath(place)).parents:
        return f"not fixed: {place} is outside the worktree area {area}; move it back there"
    command = ["git", "worktree", "repair", str(place)]
    with ctx.lane(ledger, None, LeaseKind.REPAIR, command):
        run_git(command[1:], cwd=ctx.root, read=False, check=False)
        verdict = ctx.verify(task, path=place)
        if not verdict.ok:
            return f"not fixed: {place} does not verify after `git worktree repair`: {verdict}"
        ledger.update_task(
            task.id,
            actor=Actor.DOCTOR,
            kind="task.moved",
            data={"from": task.worktree_path, "to": str(place)},
            worktree_path=str(place),
        )
    return f"registered at {place}"


def _take_over(ledger: Ledger, task: Task, fix: bool, verb: str, detail: str) -> Task | Finding:
    """A task left in a multi-step state, claimed for `--fix` (this process owns it now); or
    the finding to report instead: its owner still works on it (`<verb>-in-progress`), `--fix`
    was not asked for (`interrupted-<verb>`), or another doctor claimed it first."""
    if task.owner_pid is not None and procs.alive(task.owner_pid, task.owner_start):
        return Finding(
            f"{verb}-in-progress", f"process {task.owner_pid} is at it", task.name, task.id
        )
    if not fix:
        return Finding(f"interrupted-{verb}", detail, task.name, task.id)
    if not ledger.claim(task.id, task.owner_pid, task.owner_start):
        return Finding(f"{verb}-in-progress", "another process took it over", task.name, task.id)
    return ledger.task(task.id)


def _interrupted_discard(
    ctx: RepoContext, ledger: Ledger, task: Task, fix: bool, actor: Actor, runtime: Runtime
) -> Finding:
    """A discard that stopped between its journalled intent and `discarded`: `--fix` finishes
    it (the operator asked for it), re-checking every blocker from disk as discard does."""
    detail = "discarding was interrupted; --fix finishes it (snapshot first, blockers re-checked)"
    taken = _take_over(ledger, task, fix, "discard", detail)
    if isinstance(taken, Finding):
        return taken
    task = taken
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


def _interrupted_finalize(
    ctx: RepoContext, ledger: Ledger, task: Task, fix: bool, actor: Actor
) -> Finding:
    """A finalize or publish that stopped after its intent: `--fix` finishes it when the journal
    and the refs show it landed (the target at the journalled result, the remote branch
    verified), and otherwise returns the task to review; its scratch worktree is removed."""
    detail = "finalizing was interrupted; --fix finishes it if the target moved, else undoes it"
    taken = _take_over(ledger, task, fix, "finalize", detail)
    if isinstance(taken, Finding):
        return taken
    task = taken
    try:
        publishing = ledger.last_event(task.id, "publish.intent")
        merging = ledger.last_event(task.id, "finalize.intent")
        if publishing is not None and (merging is None or publishing.seq > merging.seq):
            done = publish.settle(ledger, task, actor)
        else:
            done = integration.settle(ctx, ledger, task, actor, reason="interrupted (doctor --fix)")
    except LaneboardError as err:
        reasons = "; ".join([str(err), *err.details])
        return Finding(
            "interrupted-finalize", detail, task.name, task.id, fixed=f"not fixed: {reasons}"
        )
    outcome = "finished" if done.state is TaskState.FINALIZED else "undone: back in review"
    return Finding("interrupted-finalize", detail, task.name, task.id, fixed=outcome)


def _interrupted_cancel(
    ctx: RepoContext, ledger: Ledger, task: Task, fix: bool, actor: Actor
) -> Finding:
    """A cancel of a task no agent had started, stopped after its intent: `--fix` finishes it
    (removes exactly what the task created, saving anything written there)."""
    detail = "cancelling was interrupted; --fix finishes it (what anyone wrote there is saved)"
    taken = _take_over(ledger, task, fix, "cancel", detail)
    if isinstance(taken, Finding):
        return taken
    return _cancel_fixed(task, detail, lambda: undo_cancel(ctx, ledger, taken, actor))


def _unanswered_cancel(
    ctx: RepoContext, ledger: Ledger, task: Task, fix: bool, actor: Actor, runtime: Runtime
) -> Finding:
    """A cancel that asked while the task was provisioning, and died before it was answered:
    the task was provisioned and no agent may be handed it. `--fix` does the cancel."""

    detail = "a cancel was asked and never finished; --fix cancels it (`laneboard cancel`)"
    if not fix:
        return Finding("interrupted-cancel", detail, task.name, task.id)
    return _cancel_fixed(
        task, detail, lambda: cancel.cancel(ctx, ledger, runtime, task, actor, timeout=0)
    )


def _cancel_fixed(task: Task, detail: str, finish: Callable[[], Task]) -> Finding:
    """The `interrupted-cancel` finding after `finish` ran: the state it left, or why not."""
    try:
        done = finish()
    except LaneboardError as err:
        reasons = "; ".join([str(err), *err.details])
        return Finding(
            "interrupted-cancel", detail, task.name, task.id, fixed=f"not fixed: {reasons}"
        )
    return Finding(
        "interrupted-cancel", detail, task.name, task.id, fixed=f"marked {done.state.value}"
    )
