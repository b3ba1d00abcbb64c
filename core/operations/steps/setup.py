"""The setup command of a new worktree (config `provision.setup`, e.g. `npm ci`), run under the
task's worktree lane right after the worktree is created.

Its output goes to a log file in the state dir (`logs/<task id>/setup.log`, kept), is streamed
to the caller as it comes (`ctx.on_output`), so a long install does not look hung, and its tail
(up to `JOURNAL_BYTES`) is kept in the journal with the exit code. A non-zero exit fails
provisioning, which then rolls back.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from laneboard.core.adapters import confine
from laneboard.core.adapters.config import state_dir
from laneboard.core.adapters.leases import Cancelled, Held
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.process import find_command, start_gated, stop_group
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import Lease, LeaseKind
from laneboard.core.domain.models import Actor, Task
from laneboard.core.operations.steps import confinement
from laneboard.core.operations.steps.cancelling import CancelRequested, stop_check

TICK_SECONDS = 0.25
"""How often the setup's output is passed on, and a cancel looked at, while it runs."""
JOURNAL_BYTES = 64 * 1024
"""At most this much of the setup's output (its end) goes into the journal."""

OnWait = Callable[[Lease], None] | None
OnOutput = Callable[[bytes], None] | None


def log_path(task: Task) -> Path:
    return state_dir() / "logs" / task.id / "setup.log"


def run_setup(
    ctx: RepoContext,
    ledger: Ledger,
    task: Task,
    actor: Actor,
) -> None:
    """Run the configured setup command in the worktree, holding its worktree lane (the worktree
    was verified just before); a non-zero exit raises."""
    setup = ctx.settings.provision.setup
    if not setup:
        ledger.append_event(task.id, ctx.repo.id, "setup.done", actor, {"command": None})
        return
    argv = ["/bin/sh", "-c", setup] if isinstance(setup, str) else list(setup)
    log = log_path(task)
    with ctx.lane(ledger, task.id, LeaseKind.SETUP, argv) as held:
        ledger.append_event(
            task.id, ctx.repo.id, "setup.started", actor, {"command": argv, "log": str(log)}
        )
        box = confinement.for_task(
            ctx.settings.confine.mode, ledger.database, ctx.common_dir, task, None
        )
        if box.decision.refused:
            raise LaneboardError(f"setup command not run: {box.decision.note}")
        data = run_logged(
            ctx, task, held, argv, Path(task.worktree_path), log, stop=stop_check(ledger, task),
            box=box,
        )  # fmt: skip
        confinement.settle(ctx.common_dir, task.id)
    if data["exit_code"] != 0:
        ledger.append_event(task.id, ctx.repo.id, "setup.failed", actor, data)
        raise LaneboardError(f"setup command {failure(data)}")
    ledger.append_event(task.id, ctx.repo.id, "setup.done", actor, data)


def failure(data: dict[str, Any]) -> str:
    """`exited with 1: <its last line> (whole output: <log>)`."""
    lines = [line for line in data["output"].splitlines() if line.strip()]
    return (
        f"exited with {data['exit_code']}: {lines[-1] if lines else 'no output'} "
        f"(whole output: {data['log']})"
    )


def run_logged(
    ctx: RepoContext,
    task: Task,
    held: Held,
    argv: list[str],
    cwd: Path,
    log: Path,
    what: str = "setup command",
    *,
    leftovers: bool = False,
    stop: Callable[[], bool] | None = None,
    box: confinement.Sandbox | None = None,
) -> dict[str, Any]:
    """Run `argv` in `cwd` as the command of `held` (a setup or a gate), its output going to
    `log` and, as it comes, to `ctx.on_output`; stopped (its whole group) when `ctx.cancel` is
    set or the caller is interrupted, and with it whatever it started that carries its lease
    (`Held.stop_leftovers`: a `setsid` child too); with `leftovers`, all of that is stopped
    when it exits as well (a gate's stray test servers); `stop`, looked at every tick, stops
    it too (the task was cancelled: `CancelRequested`); with a `box` that confines, it runs in
    that sandbox (no channel: it asks nothing of laneboard). Returns what the journal keeps: the
    command, exit code (128+N for signal N), the output's tail and the log's path."""
    env = {
        **os.environ,
        **ctx.settings.env,
        "LANEBOARD_TASK": task.name,
        "LANEBOARD_TASK_ID": task.id,
        "LANEBOARD_WORKTREE": str(cwd),
        "LANEBOARD_ROOT": str(ctx.root),
        **held.store.marker(held.lease.seq),
    }
    executable = find_command(argv[0])
    if executable is None:
        raise LaneboardError(f"{what} not found: {argv[0]}")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as output, open(log, "rb") as follow:

        def stream() -> None:
            if ctx.on_output is not None and (chunk := follow.read()):
                ctx.on_output(chunk)

        with contextlib.ExitStack() as fds:
            run = argv
            pass_fds: tuple[int, ...] = ()
            if box is not None and box.layout is not None and box.bwrap is not None:
                fd = fds.enter_context(confine.seccomp_fd())
                run = confine.bwrap_argv(box.bwrap, box.layout, argv, cwd=str(cwd), seccomp_fd=fd)
                env = confine.environment(
                    box.layout, env, common_dir=ctx.common_dir, task_id=None, state=state_dir()
                )
                executable, pass_fds = run[0], () if fd is None else (fd,)
            proc = start_gated(
                executable, run, cwd, env, held.record_child, output=output.fileno(),
                pass_fds=pass_fds,
            )  # fmt: skip
        try:
            while True:
                stream()
                if ctx.cancel is not None and ctx.cancel.cancelled:
                    raise Cancelled(f"`{argv[-1]}` in {task.name} was cancelled")
                if stop is not None and stop():
                    raise CancelRequested(f"{task.name} was cancelled during its {what}")
                try:
                    code = proc.wait(timeout=TICK_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    continue
        except BaseException:
            stop_group(proc)  # interrupted or cancelled: the command goes too
            held.stop_leftovers()
            raise
        if leftovers:
            stop_group(proc)
            held.stop_leftovers()
        stream()
    code = code if code >= 0 else 128 - code
    held.exit_code = code
    size = log.stat().st_size
    with open(log, "rb") as handle:
        handle.seek(max(0, size - JOURNAL_BYTES))
        tail = handle.read().decode(errors="replace")
    return {
        "command": argv,
        "exit_code": code,
        "output": tail,
        "output_truncated": size > JOURNAL_BYTES,
        "log": str(log),
    }
