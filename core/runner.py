"""`laneboard exec`: run one command in a lane, holding the lane's lease while it runs.

Owns the lean path from a command line to a running command: find the repo and lane by reading
files and the ledger (no pygit2, no pydantic unless a config file needs validating), wait for
admission, verify the worktree (a forged, symlinked or moved lane is refused, never run at the
root instead), run the command with stdio attached, pass signals on, and release the lease only
after the command has exited. Shims call this too; a command already running inside a lease that
covers the lane runs directly, so nested shims never wait on their own lane.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from core.config import Settings
from core.db import Database
from core.errors import LaneboardError
from core.identity import Identity
from core.leases import LEASE_ENV, Lease, LeaseKind, LeaseStore, hold
from core.verify import common_dir_of, verify_worktree

SHIM_MARKER = b"# laneboard-shim"
"""The second line of every shim script; command lookup skips files that carry it."""
SI_KERNEL = 0x80
"""`si_code` of a signal the kernel sent, e.g. the terminal's Ctrl-C to the foreground group."""
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


UNSETTLED = ("new", "provisioning", "discarding")
"""States in which a task's worktree is being created or removed: no command may run there."""


class LaneRejected(LaneboardError):
    """The lane's worktree failed verification; nothing was run."""


class CommandNotFound(LaneboardError):
    """The command is not on PATH (outside the shims); exit code 127 as in a shell."""

    exit_code = 127


class CannotRun(LaneboardError):
    """The command exists but cannot be executed; exit code 126 as in a shell."""

    exit_code = 126


@dataclass(frozen=True)
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


def resolve_target(db: Database, start: Path, lane: str | None) -> LaneTarget:
    """The lane `lane` (a task name or id; None = root) of the repo containing `start`."""
    common = common_dir_of(start)
    if common is None:
        raise LaneboardError(f"{start} is not inside a git repository")
    repo = db.conn.execute(
        "SELECT id, root FROM repos WHERE common_dir = ?", (str(common),)
    ).fetchone()
    if repo is None:
        raise LaneboardError(f"{start} is in no registered repository; run `laneboard init`")
    root = Path(repo["root"])
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
        cwd=Path(task["worktree_path"]),
        area=Path(task["area"]),
        admin_name=task["admin_name"],
        identity=identity,
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


def find_command(name: str, path: str | None = None) -> str | None:
    """The first executable `name` on PATH that is not a laneboard shim (a name with a slash is
    used as given). Shims are recognised per file, by their marker line, so a real command in a
    directory that also holds shims of some task is still found, and no shim calls itself."""
    if "/" in name:
        return name
    for directory in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        try:
            with open(candidate, "rb") as handle:
                head = handle.read(256)
        except OSError:
            continue
        if SHIM_MARKER not in head:
            return candidate
    return None


def run(
    store: LeaseStore,
    target: LaneTarget,
    settings: Settings,
    argv: list[str],
    *,
    timeout: float | None,
    on_wait: Callable[[Lease], None] | None,
) -> int:
    """Run `argv` in `target`'s lane; return its exit code (128+N when killed by signal N).

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
        env[LEASE_ENV] = str(held.lease.seq)
        held.exit_code = spawn_and_wait(executable, argv, target.cwd, env, held.record_child)
    return held.exit_code


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


def spawn_and_wait(
    executable: str,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    started: Callable[[int], None],
    *,
    stdin: int | None = None,
    output: int | None = None,
) -> int:
    """Run the command and return its exit status (128+N if signal N killed it). It gets our
    stdio unless `stdin` or `output` (for both stdout and stderr) give file descriptors.

    The child is forked, reports its pid through `started` (which records it in the lease), and
    only then is let through a gate to exec: a lease never runs a command it has not recorded.
    SIGINT, SIGTERM and SIGHUP sent to us by another process are passed on; a terminal's Ctrl-C
    already reaches the command, which shares our process group, so it is not sent twice.
    """
    watched = {*FORWARDED, signal.SIGCHLD}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    gate_read, gate_write = os.pipe()
    error_read, error_write = os.pipe()  # close-on-exec: EOF means exec succeeded
    try:
        pid = os.fork()
        if pid == 0:
            _child(
                executable,
                argv,
                cwd,
                env,
                previous,
                (gate_read, gate_write, error_write),
                (stdin, output),
            )
        os.close(gate_read)
        os.close(error_write)
        try:
            started(pid)
        except BaseException:
            os.close(gate_write)  # the child reads EOF and exits without running anything
            os.waitpid(pid, 0)
            raise
        os.write(gate_write, b"!")
        os.close(gate_write)
        with os.fdopen(error_read, "rb") as errors:
            failure = errors.read()
        if failure:
            os.waitpid(pid, 0)
            number = int(failure.decode() or 0)
            message = f"{argv[0]}: cannot run: {os.strerror(number)}"
            raise CommandNotFound(message) if number == errno.ENOENT else CannotRun(message)
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            info = signal.sigtimedwait(watched, 1.0)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            if info.si_code != SI_KERNEL:
                with suppress(ProcessLookupError):
                    os.kill(pid, info.si_signo)
    finally:
        while signal.sigtimedwait(watched, 0) is not None:
            pass  # signals that arrived as the command ended must not kill us before we report
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _child(
    executable: str,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    mask: Iterable[int],
    pipes: tuple[int, int, int],
    stdio: tuple[int | None, int | None],
) -> NoReturn:
    """In the forked child: wait at the gate, then become the command. Never returns."""
    gate_read, gate_write, error_write = pipes
    stdin, output = stdio
    try:
        os.close(gate_write)
        if stdin is not None:
            os.dup2(stdin, 0)
        if output is not None:
            os.dup2(output, 1)
            os.dup2(output, 2)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(signum, signal.SIG_DFL)  # Python ignores these; the command must not
        if os.read(gate_read, 1) != b"!":
            os._exit(125)
        os.close(gate_read)
        os.chdir(cwd)
        os.execve(executable, argv, env)
    except OSError as err:
        with suppress(OSError):
            os.write(error_write, str(err.errno or 0).encode())
    finally:
        os._exit(127)
