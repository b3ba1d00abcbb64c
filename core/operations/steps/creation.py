"""Creating a task's branch and linked worktree, and every step after `git worktree add` (pin,
snapshot applied for a restore, copies, setup, unlock), in the order DESIGN.md section 6 gives.

Intent is written to the ledger before any effect (making this process the task's owner while it
is `provisioning`), each effect is journalled after it happens, and every step after `git
worktree add` is idempotent, so `doctor --fix` can finish an interrupted run from the ledger
alone. A failure, an error or an interruption (Ctrl-C, a hang-up) rolls back exactly what this
task created (`steps.undo`); it never deletes a branch or directory that existed before, and it
never uses `-B` or checks out a pre-existing branch. `provision` and `restore` both create
through here.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from laneboard.core.adapters import faults
from laneboard.core.adapters.git import create_branch, worktree_add, worktree_unlock
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.adapters.ledger import Ledger, NameTaken, new_task_id
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.identity import TOKEN_FILE
from laneboard.core.domain.lanes import LeaseKind
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.values import replace
from laneboard.core.operations.steps import cancelling
from laneboard.core.operations.steps.copies import copy_files
from laneboard.core.operations.steps.created import intent, locked_by_us, pristine, record_created
from laneboard.core.operations.steps.naming import branch_message, lock_reason
from laneboard.core.operations.steps.setup import run_setup
from laneboard.core.operations.steps.undo import rollback_after


def refuse_live_name(ledger: Ledger, ctx: RepoContext, name: str) -> None:
    existing = ledger.live_task(ctx.repo.id, name)
    if existing is not None:
        raise NameTaken(
            f"task name {name!r} is taken by a live task ({existing.id}, {existing.state.value})"
        )


def check_area(area: Path) -> None:
    """The worktree area must be a real directory at its configured place (or not exist yet):
    a symlinked area would put worktrees, and everything removal deletes, somewhere else."""
    try:
        info = area.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise LaneboardError(
            f"the worktree area {area} is a symbolic link; laneboard keeps worktrees only in a "
            "real directory at that place (remove the link, or set worktrees.area)"
        )
    if not stat.S_ISDIR(info.st_mode):
        raise LaneboardError(f"the worktree area {area} exists and is not a directory")
    if os.path.realpath(area) != os.path.abspath(area):
        raise LaneboardError(f"the worktree area {area} is reached through a symbolic link")


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
    *,
    branch_taken: str | None = None,
) -> Task:
    """Record the intent, then create `branch` at `start_sha` and its worktree, then `finish`.

    `base_sha` is the task's base (what review compares against); `start_sha` is where the new
    branch starts (the same for a new task; the saved tip for a restored one). `extra` goes into
    the intent event (a restore names its snapshot there). `branch_taken` is the refusal when
    `branch` exists already (the caller's words for it).
    """

    area = ctx.area
    path = area / name
    add = ["git", "worktree", "add", str(path), branch]
    # Refuse before the intent is written, not half-way through.
    LeaseStore(ledger.database, ctx.settings.lanes.slots).reentry(ctx.repo.id, None, add)
    check_area(area)
    if ctx.git.branch_tip(branch) is not None:
        raise LaneboardError(
            branch_taken
            or f"branch {branch} already exists; laneboard only works on branches it creates"
        )
    if os.path.lexists(path):
        raise LaneboardError(f"{path} already exists; laneboard never reuses a directory")
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
            "target": extra.get("target"),
            "parent_id": extra.get("parent_id"),
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
        max_children=ctx.settings.delegation.max_children,
    )
    faults.checkpoint("provision.after_intent")
    try:
        cancelling.check(ledger, task)
        with ctx.lane(ledger, None, LeaseKind.PROVISION, add):
            ensure_excluded(ctx, ledger, task, actor)
            check_area(area)
            area.mkdir(parents=True, exist_ok=True)
            check_area(area)
            # The branch first, by compare-and-swap from "absent", with a reflog entry naming
            # the task: proof after any crash that laneboard created it.
            create_branch(ctx.root, branch, start_sha, branch_message(task.id))
            task = record_created(ledger, task, actor, start_sha, worktree=False)
            faults.checkpoint("provision.after_branch")
            worktree_add(ctx.root, path, branch, lock_reason(task.id))
            task = record_created(ledger, task, actor, start_sha, branch=False)
            faults.checkpoint("provision.after_worktree_add")
        cancelling.check(ledger, task)
    except (LaneboardError, OSError, KeyboardInterrupt) as err:
        raise rollback_after(ctx, ledger, task, err, actor=actor) from None
    return finish(ctx, ledger, task, actor, setup_is_ours=True)


def finish(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
    *,
    setup_is_ours: bool,
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
            # Only a restore applies a snapshot: `new` never loads pygit2 (80 ms of its start).
            from laneboard.core.adapters import snapshot

            saved = snapshot.read(ctx.root, planned["snapshot_ref"], planned["snapshot_sha"])
            start = planned.get("start_sha", task.branch_tip_at_creation or "")
            if not setup_is_ours and not pristine(task, start):
                # Applying writes over every file: after a crash, someone may have worked here.
                raise LaneboardError(
                    f"{task.worktree_path} changed after the interruption; the snapshot "
                    f"{saved.ref} was not applied over it"
                )
            snapshot.apply(Path(task.worktree_path), saved, common_dir=ctx.common_dir)
            ledger.append_event(task.id, ctx.repo.id, "snapshot.applied", actor, {"ref": saved.ref})
        faults.checkpoint("restore.after_apply")
        cancelling.check(ledger, task)
        if "files.copied" not in done:
            copy_files(ctx, ledger, task, actor)
        faults.checkpoint("provision.after_copy")
        if "setup.done" not in done:
            run_setup(ctx, ledger, task, actor)
        faults.checkpoint("provision.after_setup")
        cancelling.check(ledger, task)
        # Unlocking reads every worktree's admin dir, so, like `worktree add`, it is a root
        # operation: run beside another task's `add` it can read a half-made admin dir and fail.
        unlock = ["git", "worktree", "unlock", task.worktree_path]
        with ctx.lane(ledger, None, LeaseKind.PROVISION, unlock):
            if locked_by_us(ctx, task):
                worktree_unlock(ctx.root, Path(task.worktree_path))
    except (LaneboardError, OSError, KeyboardInterrupt) as err:
        raise rollback_after(ctx, ledger, task, err, actor=actor, force=setup_is_ours) from None
    # A cancel asked from here on is answered by the start, which refuses to hand the worktree
    # to an agent, and by the cancel itself, which removes a provisioned task.
    faults.checkpoint("provision.before_settle")
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="task.provisioned",
        state=TaskState.PROVISIONED,
        expect=TaskState.PROVISIONING,
        settled=True,
    )


def ensure_excluded(ctx: RepoContext, ledger: Ledger, task: Task, actor: Actor) -> None:
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
    assert verdict.identity is not None and verdict.admin_name is not None
    token = os.urandom(16).hex()
    admin = ctx.common_dir / "worktrees" / verdict.admin_name
    fd = os.open(admin / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
    try:
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
    identity = replace(verdict.identity, admin_token=token)
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="worktree.pinned",
        data={"admin_name": verdict.admin_name, **identity.as_dict()},
        admin_name=verdict.admin_name,
        identity=identity,
    )
