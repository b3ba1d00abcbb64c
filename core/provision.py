"""Provisioning: from a task name to a pinned branch and linked worktree (DESIGN.md section 6).

Owns the order of side effects and their rollback. Intent is written to the ledger before any
effect, each effect is journalled after it happens, and every step after `git worktree add` is
idempotent, so `laneboard doctor` can finish an interrupted run from the ledger alone. A failure
rolls back exactly what this task created; it never deletes a branch or directory that existed
before, and it never uses `-B` or checks out a pre-existing branch.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core import faults, procs, snapshot
from core.errors import LaneboardError
from core.git import (
    create_branch,
    delete_ref_if,
    status,
    worktree_add,
    worktree_list,
    worktree_remove,
    worktree_unlock,
)
from core.leases import LEASE_ENV, Lease, LeaseKind, LeaseStore
from core.ledger import Ledger, NameTaken, new_task_id
from core.models import Actor, Task, TaskState
from core.names import branch_for
from core.repo import RepoContext
from core.runner import find_command, spawn_and_wait

LOCK_PREFIX = "laneboard: initializing task "
SETUP_TAIL_LINES = 20


class ProvisionFailed(LaneboardError):
    """Provisioning stopped; what it had created was rolled back (the message says what)."""


def lock_reason(task_id: str) -> str:
    """The `git worktree lock` reason that marks a worktree as being created by this task. It is
    the proof, after a crash, that laneboard created the worktree and its branch."""
    return f"{LOCK_PREFIX}{task_id}"


OnWait = Callable[[Lease], None] | None


def provision(
    ctx: RepoContext,
    ledger: Ledger,
    name: str,
    base_ref: str,
    actor: Actor,
    on_wait: OnWait = None,
) -> Task:
    """Create task `name` with branch `<prefix>/<name>` and a worktree at `<area>/<name>`, both at
    the commit `base_ref` names now. Every check that can refuse runs before the first write.

    `git worktree add` runs under a root-lane lease (it writes shared git metadata), so it waits
    for in-flight lane commands of the repo and holds back later ones; `on_wait` hears about it.
    """
    branch = branch_for(ctx.settings.branch_prefix, name)
    _refuse_live_name(ledger, ctx, name)
    base_sha = ctx.git.resolve_commit(base_ref)
    return create(ctx, ledger, name, branch, base_ref, base_sha, base_sha, {}, actor, on_wait)


def _refuse_live_name(ledger: Ledger, ctx: RepoContext, name: str) -> None:
    existing = ledger.live_task(ctx.repo.id, name)
    if existing is not None:
        raise NameTaken(
            f"task name {name!r} is taken by a live task ({existing.id}, {existing.state.value})"
        )


def create(
    ctx: RepoContext,
    ledger: Ledger,
    name: str,
    branch: str,
    base_ref: str,
    base_sha: str,
    start_sha: str,
    extra: dict[str, Any],
    actor: Actor,
    on_wait: OnWait,
) -> Task:
    """Record the intent, then create `branch` at `start_sha` and its worktree, then `finish`.

    `base_sha` is the task's base (what review compares against); `start_sha` is where the new
    branch starts (the same for a new task; the saved tip for a restored one). `extra` goes into
    the intent event (a restore names its snapshot there).
    """
    area = ctx.area
    path = area / name
    add = ["git", "worktree", "add", str(path), branch]
    # Refuse before the intent is written, not half-way through.
    LeaseStore(ledger.database, ctx.settings.lanes.slots).reentry(ctx.repo.id, None, add)
    if ctx.git.branch_tip(branch) is not None:
        raise LaneboardError(
            f"branch {branch} already exists; laneboard only works on branches it creates"
        )
    if os.path.lexists(path):
        raise LaneboardError(f"{path} already exists; laneboard never reuses a directory")
    pid, start = procs.me()
    task = ledger.insert_task(
        {
            "id": new_task_id(),
            "repo_id": ctx.repo.id,
            "name": name,
            "state": TaskState.PROVISIONING.value,
            "base_ref": base_ref,
            "base_sha": base_sha,
            "branch": branch,
            "area": str(area),
            "worktree_path": str(path),
            "owner_pid": pid,
            "owner_start": start,
        },
        actor,
        {
            "base_ref": base_ref,
            "base_sha": base_sha,
            "start_sha": start_sha,
            "branch": branch,
            "path": str(path),
            **extra,
        },
    )
    faults.checkpoint("provision.after_intent")
    try:
        with ctx.lane(ledger, None, LeaseKind.PROVISION, add, on_wait):
            _ensure_excluded(ctx, ledger, task, actor)
            area.mkdir(parents=True, exist_ok=True)
            # The branch first, by compare-and-swap from "absent", with a reflog entry naming
            # the task: proof after any crash that laneboard created it.
            create_branch(ctx.root, branch, start_sha, branch_message(task.id))
            task = record_created(ledger, task, actor, start_sha, worktree=False)
            faults.checkpoint("provision.after_branch")
            worktree_add(ctx.root, path, branch, lock_reason(task.id))
            task = record_created(ledger, task, actor, start_sha, branch=False)
            faults.checkpoint("provision.after_worktree_add")
    except (LaneboardError, OSError) as err:
        reason = describe(err)
        task = adopt_leftover_worktree(ctx, ledger, task, actor)
        task = rollback(ctx, ledger, task, reason=reason, actor=actor, on_wait=on_wait)
        raise ProvisionFailed(f"provisioning {name} failed: {reason}") from None
    return finish(ctx, ledger, task, actor, setup_is_ours=True, on_wait=on_wait)


def describe(err: BaseException) -> str:
    """One line for a refusal or an operating-system error."""
    if isinstance(err, OSError) and not isinstance(err, LaneboardError):
        where = f"{err.filename}: " if err.filename else ""
        return f"{where}{err.strerror or err}"
    return str(err)


def branch_message(task_id: str) -> str:
    """The reflog message of a branch laneboard creates for a task."""
    return f"laneboard: create branch for task {task_id}"


def adopt_leftover_worktree(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> Task:
    """After a failed or interrupted `git worktree add`, git may have left the worktree behind.
    It is the task's own exactly when it carries this task's lock reason; journal it so, so that
    rollback removes it. Anything else at the path is left alone."""
    if task.worktree_created_by_us or not _locked_by_us(ctx, task):
        return task
    return record_created(
        ledger, task, actor, task.branch_tip_at_creation or "", branch=False, recovered=True
    )


def intent(ledger: Ledger, task: Task) -> dict[str, Any]:
    """What the task's `task.intent` event recorded before anything was created."""
    event = next((e for e in ledger.events(task.id) if e.kind == "task.intent"), None)
    return dict(event.data) if event else {}


def record_created(
    ledger: Ledger,
    task: Task,
    actor: Actor,
    tip: str,
    *,
    branch: bool = True,
    worktree: bool = True,
    **data: Any,
) -> Task:
    """Journal that laneboard created the task's branch (at `tip`) and/or its worktree: the
    ownership facts that alone allow removing them later."""
    fields: dict[str, Any] = {}
    if branch:
        fields.update(branch_created_by_us=True, branch_tip_at_creation=tip)
    if worktree:
        fields.update(worktree_created_by_us=True)
    kind = "worktree.created" if worktree else "branch.created"
    return ledger.update_task(
        task.id,
        actor=actor,
        kind=kind,
        data={"path": task.worktree_path, "branch": task.branch, "tip": tip, **data},
        **fields,
    )


def restore(ctx: RepoContext, ledger: Ledger, name: str, actor: Actor, on_wait: OnWait) -> Task:
    """Bring the most recently discarded task called `name` back from its newest snapshot, as a
    new task with the same name and branch name: HEAD, staged, unstaged and untracked files as
    they were. The discarded task's record and snapshot stay as they are."""
    _refuse_live_name(ledger, ctx, name)
    old = ledger.discarded_task(ctx.repo.id, name)
    if old is None:
        raise LaneboardError(f"no discarded task named {name!r} in {ctx.root}")
    snaps = ledger.snapshots(old.id)
    if not snaps:
        raise LaneboardError(f"task {name} ({old.id}) was discarded without a snapshot")
    _, ref, sha = snaps[-1]
    saved = snapshot.read(ctx.root, ref, sha)
    if ctx.git.branch_tip(old.branch) is not None:
        raise LaneboardError(
            f"branch {old.branch} exists; restore creates it anew and never reuses a branch"
        )
    extra = {"restore_from": old.id, "snapshot_ref": ref, "snapshot_sha": sha}
    task = create(
        ctx,
        ledger,
        name,
        old.branch,
        old.base_ref,
        old.base_sha,
        saved.tip or saved.head,
        extra,
        actor,
        on_wait,
    )
    ledger.append_event(old.id, ctx.repo.id, "task.restored_as", actor, {"task_id": task.id})
    return task


def finish(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    *,
    setup_is_ours: bool,
    on_wait: OnWait = None,
) -> Task:
    """Run every step after `git worktree add` that the journal does not show as done, then mark
    the task provisioned. Idempotent; `doctor` calls it to finish an interrupted provisioning.

    `setup_is_ours`: files in the worktree were made only by this provisioning, so a failure may
    force-remove the worktree. `doctor` passes False: after a crash, someone may have been in there.
    """
    try:
        task = _pin(ctx, ledger, task, actor)
        faults.checkpoint("provision.after_pin")
        done = {event.kind for event in ledger.events(task.id)}
        planned = intent(ledger, task)
        if "snapshot_ref" in planned and "snapshot.applied" not in done:
            saved = snapshot.read(ctx.root, planned["snapshot_ref"], planned["snapshot_sha"])
            start = planned.get("start_sha", task.branch_tip_at_creation or "")
            if not setup_is_ours and not pristine(task, start):
                # Applying writes over every file: after a crash, someone may have worked here.
                raise LaneboardError(
                    f"{task.worktree_path} changed after the interruption; the snapshot "
                    f"{saved.ref} was not applied over it"
                )
            snapshot.apply(Path(task.worktree_path), saved)
            ledger.append_event(task.id, ctx.repo.id, "snapshot.applied", actor, {"ref": saved.ref})
        faults.checkpoint("restore.after_apply")
        if "files.copied" not in done:
            _copy_files(ctx, ledger, task, actor)
        faults.checkpoint("provision.after_copy")
        if "setup.done" not in done:
            _run_setup(ctx, ledger, task, actor, on_wait)
        faults.checkpoint("provision.after_setup")
        # Unlocking reads every worktree's admin dir, so, like `worktree add`, it is a root
        # operation: run beside another task's `add` it can read a half-made admin dir and fail.
        unlock = ["git", "worktree", "unlock", task.worktree_path]
        with ctx.lane(ledger, None, LeaseKind.PROVISION, unlock, on_wait):
            if _locked_by_us(ctx, task):
                worktree_unlock(ctx.root, Path(task.worktree_path))
    except (LaneboardError, OSError) as err:
        reason = describe(err)
        rollback(
            ctx, ledger, task, reason=reason, actor=actor, force=setup_is_ours, on_wait=on_wait
        )
        raise ProvisionFailed(f"provisioning {task.name} failed: {reason}") from None
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="task.provisioned",
        state=TaskState.PROVISIONED,
        expect=TaskState.PROVISIONING,
        settled=True,
    )


def _ensure_excluded(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> None:
    """Add the worktree area to the repo's `info/exclude` so the root never sees the worktrees
    as untracked files. Appends one line once; never rewrites what the user wrote there."""
    area = Path(task.area)
    try:
        relative = area.relative_to(ctx.root)
    except ValueError:
        return  # a sibling area is outside the root's tree
    line = f"/{relative.as_posix()}/"
    exclude = ctx.common_dir / "info" / "exclude"
    try:
        current = exclude.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        current = ""
    if line in current.splitlines():
        return
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a", encoding="utf-8", errors="surrogateescape") as handle:
        if current and not current.endswith("\n"):
            handle.write("\n")
        handle.write(f"{line}\n")
    ledger.append_event(
        task.id, ctx.repo.id, "exclude.added", actor, {"file": str(exclude), "line": line}
    )


def _pin(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> Task:
    """Verify the new worktree and record its admin name and device/inode identity."""
    verdict = ctx.verify(task)
    if not verdict.ok:
        raise LaneboardError(f"the new worktree failed verification: {verdict}")
    if task.identity is not None:
        return task
    assert verdict.identity is not None
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="worktree.pinned",
        data={"admin_name": verdict.admin_name, **verdict.identity.as_dict()},
        admin_name=verdict.admin_name,
        identity=verdict.identity,
    )


def _copy_files(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> None:
    """Copy the root's allowlisted untracked files (config `provision.copy`) into the worktree.

    Only regular files inside the root are copied; a path that already exists in the worktree
    (for instance a tracked file) is left alone and reported.
    """
    copied: list[str] = []
    skipped: list[str] = []
    digests: dict[str, str] = {}
    worktree = Path(task.worktree_path)
    for pattern in ctx.settings.provision.copy:
        for match in sorted(glob.glob(pattern, root_dir=ctx.root, recursive=True)):
            source = ctx.root / match
            if source.is_symlink() or not source.is_file():
                skipped.append(f"{match} (not a regular file)")
                continue
            if ctx.root.resolve() not in source.resolve().parents:
                skipped.append(f"{match} (outside the root)")
                continue
            target = worktree / match
            if os.path.lexists(target):
                skipped.append(f"{match} (already in the worktree)")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
            copied.append(match)
            digests[match] = file_digest(target)
    # The digests let removal tell an unchanged copy (laneboard's) from a file someone edited.
    ledger.append_event(
        task.id,
        ctx.repo.id,
        "files.copied",
        actor,
        {"copied": copied, "skipped": skipped, "sha256": digests},
    )


def file_digest(path: Path) -> str:
    """SHA-256 of a file's content."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def copied_files(ledger: Ledger, task: Task) -> dict[str, str]:
    """Files provisioning copied into the task's worktree, with their SHA-256 at copy time."""
    found: dict[str, str] = {}
    for event in ledger.events(task.id):
        if event.kind == "files.copied":
            found.update(event.data.get("sha256", {}))
    return found


def pristine(task: Task, start: str) -> bool:
    """The worktree is exactly a finished checkout of `start`: nothing missing, nothing added,
    nothing ignored."""
    try:
        facts = status(Path(task.worktree_path), ignored=True)
    except LaneboardError:
        return False
    return facts.head == start and facts.clean and not facts.ignored


def unchanged_copies(ledger: Ledger, task: Task) -> frozenset[str]:
    """Copied files still byte-for-byte as provisioning copied them: laneboard's own, not work."""
    worktree = Path(task.worktree_path)
    unchanged = set()
    for relative, digest in copied_files(ledger, task).items():
        path = worktree / relative
        if path.is_file() and not path.is_symlink() and file_digest(path) == digest:
            unchanged.add(relative)
    return frozenset(unchanged)


def _run_setup(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, on_wait: OnWait) -> None:
    """Run the configured setup command in the worktree, holding its worktree lane (the worktree
    was verified just before); a non-zero exit fails provisioning."""
    setup = ctx.settings.provision.setup
    if not setup:
        ledger.append_event(task.id, ctx.repo.id, "setup.done", actor, {"command": None})
        return
    argv = ["/bin/sh", "-c", setup] if isinstance(setup, str) else list(setup)
    env = {
        **os.environ,
        **ctx.settings.env,
        "LANEBOARD_TASK": task.name,
        "LANEBOARD_TASK_ID": task.id,
        "LANEBOARD_WORKTREE": task.worktree_path,
        "LANEBOARD_ROOT": str(ctx.root),
    }
    executable = find_command(argv[0])
    if executable is None:
        raise LaneboardError(f"setup command not found: {argv[0]}")
    with (
        ctx.lane(ledger, task.id, LeaseKind.SETUP, argv, on_wait) as held,
        tempfile.TemporaryFile() as log,
        open(os.devnull, "rb") as nothing,
    ):
        ledger.append_event(task.id, ctx.repo.id, "setup.started", actor, {"command": argv})
        env[LEASE_ENV] = str(held.lease.seq)
        code = spawn_and_wait(
            executable,
            argv,
            Path(task.worktree_path),
            env,
            held.record_child,
            stdin=nothing.fileno(),
            output=log.fileno(),
        )
        held.exit_code = code
        log.seek(0)
        tail = log.read().decode(errors="replace").splitlines()[-SETUP_TAIL_LINES:]
    data: dict[str, Any] = {"command": argv, "exit_code": code, "output_tail": tail}
    if code != 0:
        ledger.append_event(task.id, ctx.repo.id, "setup.failed", actor, data)
        last = tail[-1] if tail else "no output"
        raise LaneboardError(f"setup command exited with {code}: {last}")
    ledger.append_event(task.id, ctx.repo.id, "setup.done", actor, data)


def _locked_by_us(ctx: RepoContext, task: Task) -> bool:
    """Git lists a worktree at the task's path locked with this task's lock reason."""
    path = os.path.realpath(task.worktree_path)
    return any(
        os.path.realpath(e.path) == path and e.locked == lock_reason(task.id)
        for e in worktree_list(ctx.root)
    )


def rollback(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    *,
    reason: str,
    actor: Actor,
    force: bool = True,
    on_wait: OnWait = None,
) -> Task:
    """Undo exactly what this task created and mark it failed.

    The worktree is removed only if the ledger says laneboard created it and it still verifies
    as that worktree; `force` (files inside may be discarded) is allowed only when this process
    made every file there. The branch is deleted only if laneboard created it, no worktree has it
    checked out, and it still points at its creation tip (compare-and-swap), so commits made on
    it are never lost. What is kept is said in the journal and in the failure reason. Removal is a
    root-lane operation: it waits for in-flight lane commands of the repo.
    """
    ledger.append_event(
        task.id,
        ctx.repo.id,
        "rollback.intent",
        actor,
        {"path": task.worktree_path, "branch": task.branch, "tip": task.branch_tip_at_creation},
    )
    command = ["laneboard", "rollback", task.name]
    with ctx.lane(ledger, None, LeaseKind.REMOVE, command, on_wait):
        kept = _undo(ctx, ledger, task, actor, force=force)
    full_reason = "; ".join([reason, *kept])
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="task.failed",
        data={"reason": full_reason, "kept": kept},
        state=TaskState.FAILED,
        settled=True,
    )


def _undo(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor, *, force: bool) -> list[str]:
    """Remove the task's worktree and branch where the ledger proves them its own; return what
    was kept and why."""
    path = Path(task.worktree_path)
    kept: list[str] = []
    entries = worktree_list(ctx.root)
    registered = any(os.path.realpath(e.path) == os.path.realpath(path) for e in entries)
    if task.worktree_created_by_us and registered:
        verdict = ctx.verify(task)
        if not verdict.ok:
            kept.append(f"worktree {path} kept: it no longer verifies ({verdict})")
        else:
            try:
                if not force:
                    _require_pristine(ctx, ledger, task)
                worktree_remove(ctx.root, path, force=True, unlock=True)
                ledger.append_event(
                    task.id, ctx.repo.id, "worktree.removed", actor, {"path": str(path)}
                )
                entries = worktree_list(ctx.root)
            except LaneboardError as err:
                kept.append(f"worktree {path} kept: {err}")
    checked_out = [e.path for e in entries if e.branch == task.branch]
    if checked_out and task.branch_created_by_us:
        kept.append(f"branch {task.branch} kept: checked out at {checked_out[0]}")
    elif task.branch_created_by_us and task.branch_tip_at_creation:
        if delete_ref_if(ctx.root, f"refs/heads/{task.branch}", task.branch_tip_at_creation):
            ledger.append_event(
                task.id,
                ctx.repo.id,
                "branch.deleted",
                actor,
                {"branch": task.branch, "tip": task.branch_tip_at_creation},
            )
        elif ctx.git.branch_tip(task.branch) is not None:
            kept.append(f"branch {task.branch} kept: it moved since creation")
    return kept


def _require_pristine(ctx: RepoContext, ledger: Ledger, task: Task) -> None:
    """Refuse unless the worktree holds nothing but its checkout at the creation tip and the
    files provisioning copied into it."""
    facts = status(Path(task.worktree_path), ignored=True)
    if facts.head != task.branch_tip_at_creation:
        raise LaneboardError(f"HEAD moved to {facts.head}")
    ours = unchanged_copies(ledger, task)
    dirty = facts.staged + facts.unstaged + facts.conflicted
    dirty += [path for path in facts.untracked + facts.ignored if path not in ours]
    if dirty:
        raise LaneboardError(f"it holds files laneboard did not put there: {dirty[0]}")
