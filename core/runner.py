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
from core.db import Database, from_db, to_db
from core.errors import LaneboardError
from core.identity import Identity
from core.leases import LEASE_ENV, Lease, LeaseKind, LeaseStore, hold
from core.verify import common_dir_of, verify_worktree

SHIM_MARKER = b"# laneboard-shim"
"""The second line of every shim script; command lookup skips files that carry it."""
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
        held.exit_code = spawn_and_wait(
            executable,
            argv,
            working_dir(target),
            env,
            held.record_child,
            own_group=not held.inherited,
        )
    return held.exit_code


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


def spawn_and_wait(
    executable: str,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    started: Callable[[int, bool], None],
    *,
    stdin: int | None = None,
    output: int | None = None,
    tick: Callable[[], None] | None = None,
    own_group: bool = True,
) -> int:
    """Run the command and return its exit status (128+N if signal N killed it). It gets our
    stdio unless `stdin` or `output` (for both stdout and stderr) give file descriptors.

    The child is forked, reported through `started(pid, own_session)` (which records it in the
    lease), and only then let through a gate to exec: a lease never runs a command it has not
    recorded. With `own_group`, the command gets a process group of its own, or a session of its
    own when none of its stdio is a terminal, so that everything it starts can be followed: its
    lease stays held while that group (or session) has members. When our stdin is the terminal
    and we are in its foreground, the command is given the foreground (Ctrl-C and Ctrl-Z reach
    it as they would from a shell; a stopped command stops us too, and `fg` resumes both), and
    the terminal is taken back when it ends. SIGINT, SIGTERM and SIGHUP that reach us, the
    hang-up of a killed tmux pane included, are passed on to the command's group. `tick` is
    called a few times a second while the command runs.
    """
    watched = {*FORWARDED, signal.SIGCHLD}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {*watched, signal.SIGTTOU})
    stdio = [0 if stdin is None else stdin, *([1, 2] if output is None else [output, output])]
    own_session = own_group and not any(os.isatty(fd) for fd in stdio)
    foreground = _foreground(stdio[0]) if own_group and not own_session else None
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
                "session" if own_session else "group" if own_group else "",
            )
        os.close(gate_read)
        os.close(error_write)
        if own_group and not own_session:
            with suppress(OSError):
                os.setpgid(pid, pid)  # on both sides, as shells do, so neither order races
            if foreground is not None:
                with suppress(OSError):
                    os.tcsetpgrp(foreground, pid)
        try:
            started(pid, own_session)
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
            done, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
            if done and os.WIFSTOPPED(status):
                if foreground is not None:
                    _stop_with(foreground, pid)
                continue
            if done:
                break
            if tick is not None:
                tick()
            info = signal.sigtimedwait(watched, 1.0 if tick is None else 0.25)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            _forward(pid, info.si_signo, own_group)
    finally:
        if foreground is not None:
            with suppress(OSError):
                os.tcsetpgrp(foreground, os.getpgrp())
        while signal.sigtimedwait(watched, 0) is not None:
            pass  # signals that arrived as the command ended must not kill us before we report
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def _foreground(fd: int) -> int | None:
    """`fd` when it is a terminal whose foreground process group is ours."""
    try:
        return fd if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp() else None
    except OSError:
        return None


def _forward(pid: int, signum: int, own_group: bool) -> None:
    """Pass a signal on to the command's process group (or to it alone, before it has one)."""
    if own_group:
        try:
            os.killpg(pid, signum)
            return
        except ProcessLookupError:
            pass
    with suppress(ProcessLookupError):
        os.kill(pid, signum)


def _stop_with(terminal: int, pid: int) -> None:
    """The command was stopped from the terminal (Ctrl-Z): take the terminal back and stop
    ourselves, so the shell sees its job stopped; once continued, give the terminal back if we
    are in the foreground again (`fg`, not `bg`) and continue the command."""
    with suppress(OSError):
        os.tcsetpgrp(terminal, os.getpgrp())
    os.kill(os.getpid(), signal.SIGSTOP)
    if _foreground(terminal) is not None:
        with suppress(OSError):
            os.tcsetpgrp(terminal, pid)
    _forward(pid, signal.SIGCONT, True)


def _child(
    executable: str,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    mask: Iterable[int],
    pipes: tuple[int, int, int],
    stdio: tuple[int | None, int | None],
    detach: str,
) -> NoReturn:
    """In the forked child: leave for a session or group of its own (`detach`), wait at the
    gate, then become the command. Never returns."""
    gate_read, gate_write, error_write = pipes
    stdin, output = stdio
    try:
        os.close(gate_write)
        if detach == "session":
            os.setsid()
        elif detach == "group":
            os.setpgid(0, 0)
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
