"""A task's sandbox, as the operations that run something confined share it (an agent's start,
`exec --lane`, a setup, a gate): whether it runs confined under the repo's policy, and if so
the sandbox's paths, made ready. A shared step: it imports no operation.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from laneboard.core.adapters import confine, taskobjects, vault
from laneboard.core.adapters.config import config_dir, state_dir
from laneboard.core.adapters.db import Database
from laneboard.core.adapters.git import git_env, run_git
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.domain.confine import MADE, Decision, Layout
from laneboard.core.domain.errors import GitError, LaneboardError
from laneboard.core.domain.models import Actor, Task
from laneboard.core.domain.names import namespace_of, namespaced
from laneboard.core.domain.values import replace, value


@value
class Sandbox:
    """How one command of a task runs: `layout` and `bwrap` are set when it runs confined."""

    decision: Decision
    bwrap: str | None = None
    layout: Layout | None = None
    objects: Path | None = None
    refs: tuple[Path, ...] = ()
    """Its own ref directory (the vault keeps the tips found there)."""


def with_private(box: Sandbox, task: Task, names: tuple[str, ...]) -> Sandbox:
    """`box` with each of `names` (a profile's `private`) bound over the worktree's entry of
    that name from `private/<task>/` in the state dir (see `Profile.private`). Only over an
    empty directory laneboard made there itself (when nothing was there; a marker in the state
    dir remembers it until the warden removes it): anything of yours at that name, a tracked
    directory, a file, a link or a directory you made, is left as it is and not bound, so the
    agent never sees your files hidden, nor does their removal end up in a commit.

    The sources live where no sandbox sees them (the state dir is masked; unlike `agentdata/`,
    which a task's sandbox writes): a task that could put a symbolic link there would have the
    next launch bind any directory of yours into its sandbox, writable."""
    if box.layout is None or not names:
        return box
    own = state_dir() / "private" / task.id
    own.mkdir(mode=0o700, parents=True, exist_ok=True)
    found: list[tuple[str, str]] = []
    for name in names:
        dest = os.path.join(box.layout.worktree, name)
        made = own / f"{MADE}{name}"
        if not _made_here(dest, made):
            continue
        source = own / name
        source.mkdir(mode=0o700, exist_ok=True)
        found.append((str(source), dest))
    return replace(box, layout=replace(box.layout, private=tuple(found)))


def _made_here(dest: str, made: Path) -> bool:
    """Whether `dest` is an empty directory laneboard made (now, or at an earlier launch whose
    warden did not get to remove it: `made` marks it)."""
    try:
        os.mkdir(dest, 0o700)
    except FileExistsError:
        try:
            info = os.lstat(dest)
            return made.exists() and stat.S_ISDIR(info.st_mode) and not os.listdir(dest)
        except OSError:
            return False
    except OSError:
        return False
    try:
        made.touch()
    except OSError:
        os.rmdir(dest)  # made just now and empty: no marker, no mount point
        return False
    return True


def channel_dir(task_id: str) -> Path:
    """The directory of a task's agent channel (in the state dir, which no sandbox sees)."""
    return state_dir() / "run" / task_id


def ref_dirs(common_dir: Path, namespace: str | None) -> list[Path]:
    """A task's own ref directories (`refs/heads/<namespace>` and its reflogs); none for a task
    whose branch has no namespace of its own."""
    if namespace is None:
        return []
    return [
        common_dir / "refs" / "heads" / namespace,
        common_dir / "logs" / "refs" / "heads" / namespace,
    ]


def sandbox(
    mode: str,
    db: Database,
    *,
    common_dir: Path,
    worktree: Path,
    admin_name: str,
    task_id: str | None,
    task_name: str,
    branch: str | None,
    channel: Path | None,
    objects: Path | None = None,
) -> Sandbox:
    """The sandbox of a command in `worktree` (a task's, or a scratch one with `task_id` None)
    under `[confine] mode`, made ready: its ref directories and their markers exist, its object
    directory exists (the task's own, or `objects` for a scratch one)."""
    state = state_dir()
    decision, probe = confine.decision(mode, state)
    if not decision.confined or probe.bwrap is None:
        return Sandbox(decision)
    if objects is None and task_id is not None:
        objects = taskobjects.directory(state, task_id)
    namespace = ref_dirs(common_dir, namespace_of(branch, task_name) if branch else None)
    admin_dir = common_dir / "worktrees" / admin_name
    confine.prepare(admin_dir, namespace, objects)
    confine.guard_dir(state)
    if task_id is not None:
        (state / "events").mkdir(parents=True, exist_ok=True)
        (state / "events" / f"{task_id}.log").touch()
    layout = confine.layout(
        db=db,
        state=state,
        config=config_dir(),
        worktree=worktree,
        admin_dir=admin_dir,
        objects=objects,
        namespace=namespace,
        task_id=task_id,
        channel=channel,
    )
    return Sandbox(decision, probe.bwrap, layout, objects, tuple(namespace[:1]))


def for_task(
    mode: str, db: Database, common_dir: Path, task: Task, channel: Path | None
) -> Sandbox:
    """`sandbox` of a command in `task`'s own worktree (its agent, its setup, its lane)."""
    assert task.admin_name is not None
    return sandbox(
        mode,
        db,
        common_dir=common_dir,
        worktree=Path(task.worktree_path),
        admin_name=task.admin_name,
        task_id=task.id,
        task_name=task.name,
        branch=task.branch,
        channel=channel,
    )


def watcher(box: Sandbox, common_dir: Path, repo_id: int, task_id: str) -> taskobjects.Watcher:
    """What moves a sandbox's new objects into the common store as they appear, verified, and
    keeps the task's new tips in the vault."""
    assert box.objects is not None and box.layout is not None
    admin = Path(box.layout.admin_dir)
    keeper = vault.tip_keeper(
        vault.path(state_dir(), repo_id), common_dir, task_id, list(box.refs), admin
    )
    return taskobjects.Watcher(
        box.objects, common_dir / "objects", also=(*box.refs, admin), after=keeper
    )


def own_namespace(ledger: Ledger, root: Path, task: Task, actor: Actor) -> Task:
    """A task whose branch predates per-task ref namespaces (`<prefix>/<name>`) gets one before
    anything of it runs confined: its branch is renamed `<prefix>/<name>/work` (git moves its
    reflog and every worktree's HEAD with it), and tasks that target the old name follow.
    Refused (nothing renamed) when git refuses, as it does for a branch under rebase."""
    new = namespaced(task.branch, task.name)
    if new is None or namespace_of(task.branch, task.name) is not None:
        return task
    if not task.branch_created_by_us:
        raise LaneboardError(
            f"{task.name}: its branch {task.branch} has no ref directory of its own, and "
            "laneboard did not create it, so it does not rename it; its agent cannot run confined"
        )
    try:
        run_git(
            ["-c", "core.hooksPath=/dev/null", "branch", "-m", task.branch, new],
            cwd=root,
            read=False,
        )
    except GitError as err:
        raise LaneboardError(
            f"{task.name}: {task.branch} must become {new} (a ref directory of its own, the only "
            f"part of refs/ its sandbox may write) and git refused: {err}"
        ) from None
    for other in ledger.tasks(include_retired=False):
        if other.repo_id == task.repo_id and other.target == task.branch:
            ledger.update_task(
                other.id, actor=actor, kind="target.renamed",
                data={"from": task.branch, "to": new}, target=new,
            )  # fmt: skip
    return ledger.update_task(
        task.id, actor=actor, kind="branch.renamed", data={"from": task.branch, "to": new},
        branch=new,
    )  # fmt: skip


def settle(common_dir: Path, task_id: str) -> None:
    """Move the task's new objects into the common store (verified) before laneboard reads its
    commits or index outside its sandbox (its warden does this as they appear; this covers a
    warden that was killed). Nothing new: nothing done."""
    taskobjects.move(taskobjects.directory(state_dir(), task_id), common_dir / "objects")


def git_in_task(
    mode: str, db: Database, common_dir: Path, repo_id: int, task: Task, args: list[str]
) -> subprocess.CompletedProcess[bytes]:
    """`git ARGS` run for laneboard in `task`'s worktree, inside the task's sandbox when the
    policy confines it: a git command that works through the worktree's HEAD and admin dir
    (a rebase), which the task itself may rewrite while it runs, then reaches only what the
    task could (its own branches), whatever they say. Its new objects are moved into the store
    before it returns. Unconfined (policy off, no bwrap): run outside, as the task would be."""
    box = for_task(mode, db, common_dir, task, None)
    worktree = task.worktree_path
    if box.layout is None or box.bwrap is None:
        return run_git(args, cwd=worktree, read=False, check=False)
    state = state_dir()
    env = confine.environment(
        box.layout, git_env(read=False), common_dir=common_dir, task_id=task.id, state=state,
        settled=True,
    )  # fmt: skip
    watch = watcher(box, common_dir, repo_id, task.id).start()
    try:
        with confine.seccomp_fd() as fd:
            argv = confine.bwrap_argv(
                box.bwrap, box.layout, ["git", *args], cwd=worktree, seccomp_fd=fd
            )
            return subprocess.run(
                argv,
                cwd=worktree,
                env=env,
                capture_output=True,
                check=False,
                stdin=subprocess.DEVNULL,
                pass_fds=() if fd is None else (fd,),
            )
    finally:
        watch.stop()
