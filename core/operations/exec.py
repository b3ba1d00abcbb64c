"""`laneboard exec`: run one command in a lane, holding the lane's lease while it runs.

Owns the lean path from a command line to a running command: find the repo and lane by reading
files and the ledger (no pygit2, no pydantic unless a config file needs validating), wait for
admission, verify the worktree (a forged, symlinked or moved lane is refused, never run at the
root instead), run the command with stdio attached, pass signals on, and release the lease only
after the command has exited. Shims call this too; a command already running inside a lease that
covers the lane runs directly, so nested shims never wait on their own lane.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from laneboard.core.adapters import confine, procs
from laneboard.core.adapters.channel import Client, LeaseDesk, Server
from laneboard.core.adapters.config import Settings, state_dir
from laneboard.core.adapters.db import Database, from_db, to_db
from laneboard.core.adapters.leases import Held, LeaseStore, hold, lease_env
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.process import CommandNotFound, find_command, spawn_and_wait
from laneboard.core.adapters.verify import common_dir_of, verify_worktree
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.identity import Identity
from laneboard.core.domain.lanes import LEASE_ENV, LEDGER_ENV, Lease, LeaseKind
from laneboard.core.domain.models import Actor
from laneboard.core.domain.names import namespace_of
from laneboard.core.domain.values import value
from laneboard.core.operations.steps import confinement

UNSETTLED = ("new", "provisioning", "discarding")
"""States in which a task's worktree is being created or removed: no command may run there."""


class LaneRejected(LaneboardError):
    """The lane's worktree failed verification; nothing was run."""


@value
class LaneTarget:
    """Where a command runs: a repo's root lane or one task's worktree lane."""

    repo_id: int
    root: Path
    common_dir: Path
    lane: str | None
    """The task id of a worktree lane; None for the root lane."""
    label: str
    """The task name, or `root`."""
    cwd: Path
    area: Path | None = None
    admin_name: str | None = None
    identity: Identity | None = None
    branch: str | None = None


def resolve_target(db: Database, start: Path, lane: str | None) -> LaneTarget:
    """The lane `lane` (a task name or id; None = root) of the repo containing `start`."""
    common = common_dir_of(start)
    if common is None:
        raise LaneboardError(f"{start} is not inside a git repository")
    repo = db.conn.execute(
        "SELECT id, root FROM repos WHERE common_dir = ?", (to_db(str(common)),)
    ).fetchone()
    if repo is None:
        raise LaneboardError(f"{start} is in no registered repository; run `laneboard init`")
    root = Path(from_db(repo["root"]) or "")
    if lane is None:
        return LaneTarget(repo["id"], root, common, None, "root", root)
    task = db.conn.execute(
        "SELECT * FROM tasks WHERE repo_id = ? AND (name = ? OR id = ?) AND retired_at IS NULL",
        (repo["id"], lane, lane),
    ).fetchone()
    if task is None:
        raise LaneboardError(f"no live task named {lane!r} in {root}")
    if task["state"] in UNSETTLED or task["dir_ino"] is None:
        raise LaneboardError(
            f"task {task['name']} is {task['state']}: its worktree is not ready for commands"
        )
    identity = Identity(*(task[key] for key in Identity.FIELDS))
    return LaneTarget(
        repo_id=repo["id"],
        root=root,
        common_dir=common,
        lane=task["id"],
        label=task["name"],
        cwd=Path(from_db(task["worktree_path"]) or ""),
        area=Path(from_db(task["area"]) or ""),
        admin_name=task["admin_name"],
        identity=identity,
        branch=task["branch"],
    )


def verify_target(target: LaneTarget) -> None:
    """Refuse a worktree lane whose worktree fails verification against its pinned identity."""
    if target.lane is None:
        return
    assert target.area is not None
    verdict = verify_worktree(
        target.cwd,
        area=target.area,
        common_dir=target.common_dir,
        admin_name=target.admin_name,
        identity=target.identity,
    )
    if not verdict.ok:
        raise LaneRejected(f"lane {target.label} rejected: {verdict}")


def run(
    store: LeaseStore,
    target: LaneTarget,
    settings: Settings,
    argv: list[str],
    *,
    timeout: float | None,
    on_wait: Callable[[Lease], None] | None,
    on_note: Callable[[str], None] | None = None,
) -> int:
    """Run `argv` in `target`'s lane; return its exit code (128+N when killed by signal N).
    A worktree lane's command runs confined by the repo's `[confine] mode` (`on_note` hears
    when it runs unconfined).

    Verifies the worktree before queueing and again right after admission; waits (cancellable
    by SIGINT, SIGTERM, SIGHUP or `timeout`) without holding anything but a queue position.
    """
    executable = find_command(argv[0])
    if executable is None:
        raise CommandNotFound(f"command not found: {argv[0]}")
    verify_target(target)
    env = {
        **os.environ,
        **settings.env,
        "LANEBOARD_REPO": str(target.root),
        "LANEBOARD_LANE": target.label,
    }
    command = [executable, *argv[1:]]
    box = _sandbox(store, target, settings, on_note) if target.lane is not None else None
    with (
        _cancel_on_signals(),
        hold(
            store,
            repo_id=target.repo_id,
            lane=target.lane,
            kind=LeaseKind.EXEC,
            command=argv,
            repo_cap=settings.lanes.repo_cap,
            timeout=timeout,
            on_wait=on_wait,
        ) as held,
    ):
        verify_target(target)  # again: the worktree may have changed while we waited
        env.update(store.marker(held.lease.seq))
        if box is None or box.layout is None:
            held.exit_code = spawn_and_wait(
                executable,
                command,
                working_dir(target),
                env,
                held.record_child,
                own_group=not held.inherited,
                passed_on=held.pass_on,
            )
            if held.passed:  # stopped: what it left was told to stop too; it goes with it
                held.wait_leftovers_gone(deadline=10.0)
        else:
            held.exit_code = _run_confined(store, target, settings, box, command, env, held)
    return held.exit_code


def _sandbox(
    store: LeaseStore,
    target: LaneTarget,
    settings: Settings,
    on_note: Callable[[str], None] | None,
) -> confinement.Sandbox:
    """The sandbox of a worktree lane's command under the confinement policy."""
    assert target.lane is not None and target.admin_name
    branch = target.branch
    if settings.confine.mode != "off" and branch and namespace_of(branch, target.label) is None:
        ledger = Ledger(store.database)
        branch = confinement.own_namespace(
            ledger, target.root, ledger.task(target.lane), Actor.CLI
        ).branch
    box = confinement.sandbox(
        settings.confine.mode,
        store.database,
        common_dir=target.common_dir,
        worktree=target.cwd,
        admin_name=target.admin_name,
        task_id=target.lane,
        task_name=target.label,
        branch=branch,
        channel=state_dir() / "run" / f"exec-{os.getpid()}-{time.monotonic_ns()}",
    )
    if box.decision.refused:
        raise LaneboardError(f"lane {target.label}: not run: {box.decision.note}")
    if not box.decision.confined and box.decision.note and on_note is not None:
        on_note(f"lane {target.label} runs unconfined: {box.decision.note}")
    return box


def _run_confined(
    store: LeaseStore,
    target: LaneTarget,
    settings: Settings,
    box: confinement.Sandbox,
    command: list[str],
    env: dict[str, str],
    held: Held,
) -> int:
    """Run the command in its sandbox, serving its channel and moving its new objects into the
    common store while it runs (and once more after)."""
    assert box.layout is not None and box.layout.channel and box.bwrap and target.lane
    desk = LeaseDesk(
        store.database.path,
        target.lane,
        target.label,
        target.repo_id,
        settings.lanes.slots,
        settings.lanes.repo_cap,
    )
    server = Server(
        Path(box.layout.channel),
        target.lane,
        target.label,
        cwd=str(target.cwd),
        env=env,
        leases=desk,
        ledger=store.database.path,
    )
    watcher = confinement.watcher(box, target.common_dir, target.repo_id, target.lane)
    inner = confine.environment(
        box.layout,
        env,
        common_dir=target.common_dir,
        task_id=target.lane,
        state=state_dir(),
        settled=True,
    )
    here = str(working_dir(target))
    try:
        with confine.seccomp_fd() as fd:
            wrapped = confine.bwrap_argv(box.bwrap, box.layout, command, cwd=here, seccomp_fd=fd)

            seen: list[tuple[int, int | None]] = []

            def started(pid: int, own_session: bool) -> None:
                held.record_child(pid, own_session)
                seen.append((pid, procs.start_time(pid)))
                server.start()
                watcher.start()

            code = spawn_and_wait(
                wrapped[0],
                wrapped,
                Path(here),
                inner,
                started,
                own_group=not held.inherited,
            )
            # The sandbox is gone with its command; the kernel ends what was left in it (in
            # its session or not) a moment later. Its lease is released once they are (not
            # found still there).
            for pid, since in seen:
                procs.wait_gone(pid, since, deadline=10.0)
            held.wait_leftovers_gone(deadline=10.0)
            return code
    finally:
        watcher.stop()
        server.close()
        shutil.rmtree(box.layout.channel, ignore_errors=True)


def run_inside(
    path: str, lane: str | None, argv: list[str], *, timeout: float | None,
    on_note: Callable[[str], None],
) -> int:  # fmt: skip
    """`laneboard exec` inside a task's sandbox: its own lane is held outside through the
    channel (`Op.LEASE`) while the command runs here, in the sandbox it is in already."""
    if lane is None:
        name = os.environ.get("LANEBOARD_TASK_NAME") or os.environ.get("LANEBOARD_LANE") or "a"
        raise LaneboardError(
            f"`exec --root` is not allowed from inside task {name}'s sandbox; run it from your "
            "own terminal"
        )
    executable = find_command(argv[0])
    if executable is None:
        raise CommandNotFound(f"command not found: {argv[0]}")
    client = Client(path)
    try:
        client.send(
            op="lease",
            lane=lane,
            argv=argv,
            outer=os.environ.get(LEASE_ENV, ""),
            timeout=timeout,
        )
        while True:
            found = client.answer()
            if "waiting" in found:
                on_note(f"waiting for its lane: {found['waiting']}")
                continue
            break
        seq = int(found["admitted"])
        env = {**os.environ, LEASE_ENV: lease_env(seq)}
        if found.get("ledger"):
            env[LEDGER_ENV] = str(found["ledger"])

        def started(pid: int, own_session: bool) -> None:
            if not found.get("inherited"):
                client.send(op="started", pid=pid, session=own_session)

        with _cancel_on_signals():
            code = spawn_and_wait(
                executable,
                [executable, *argv[1:]],
                Path(os.getcwd()),
                env,
                started,
                own_group=not found.get("inherited"),
            )
        with contextlib.suppress(OSError):
            client.send(op="exit", code=code)
        return code
    finally:
        client.close()


def working_dir(target: LaneTarget) -> Path:
    """Where the command runs: the caller's directory when it lies inside the lane's tree (a
    shim called from `frontend/` runs there), else the top of the lane (the worktree, or the
    root for the root lane)."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:  # the caller's directory was removed
        return target.cwd
    top = os.path.realpath(target.cwd)
    if here != top and not here.startswith(top.rstrip("/") + "/"):
        return target.cwd
    if target.lane is None:
        # A root command is not run inside a task's worktree (or any other checkout in the root).
        directory = Path(here)
        while str(directory) != top and directory != directory.parent:
            if os.path.lexists(directory / ".git"):
                return target.cwd
            directory = directory.parent
    return Path(here)


class _Interrupted(BaseException):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _cancel_on_signals:
    """While waiting, SIGTERM and SIGHUP cancel the wait as SIGINT does (KeyboardInterrupt)."""

    def __enter__(self) -> None:
        def interrupt(signum: int, frame: object) -> None:
            raise _Interrupted(signum)

        self._old = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._old.items():
            signal.signal(signum, handler)


def exit_code_for(err: BaseException) -> int | None:
    """The exit code for an interrupted wait (128 + signal), or None for other errors."""
    if isinstance(err, _Interrupted):
        return 128 + err.signum
    if isinstance(err, KeyboardInterrupt):
        return 128 + signal.SIGINT
    return None
