"""Starting a command and waiting for it: the fork gate, process groups and sessions, the
terminal's foreground, and passing signals on (used by `laneboard exec` and by provisioning's
setup command).

`spawn_and_wait` forks and runs Python in the child before `exec` (the gate that lets the
caller record the child first), and blocks signals with `pthread_sigmask`: it is for a process
with a single thread (the command line). Never call it from a thread of the board.
`start_gated` is the thread-safe way (no Python runs in the child): `subprocess` starts a shell
that waits at the same kind of gate, then execs the command; use it wherever the service runs.
"""

from __future__ import annotations

import errno
import os
import select
import signal
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from laneboard.core.adapters import procs
from laneboard.core.domain.errors import LaneboardError

if TYPE_CHECKING:
    import subprocess
from laneboard.core.domain.lanes import SHIM_MARKER

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class CommandNotFound(LaneboardError):
    """The command is not on PATH (outside the shims); exit code 127 as in a shell."""

    exit_code = 127


class CannotRun(LaneboardError):
    """The command exists but cannot be executed; exit code 126 as in a shell."""

    exit_code = 126


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
    passed_on: Callable[[int], None] | None = None,
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
    hang-up of a killed tmux pane included, are passed on to the command's group, and then
    given to `passed_on` (which passes them on to what left the group). `tick` is called a
    few times a second while the command runs.
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
            if passed_on is not None:
                passed_on(info.si_signo)
    finally:
        if foreground is not None:
            with suppress(OSError):
                os.tcsetpgrp(foreground, os.getpgrp())
        while signal.sigtimedwait(watched, 0) is not None:
            pass  # signals that arrived as the command ended must not kill us before we report
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


def wait_handling_signals(proc: subprocess.Popen[bytes]) -> int:
    """Wait for `proc` in the main thread of a process with other threads, and run the main
    thread's signal handlers as soon as any signal arrives, whichever thread the kernel gave it
    to. (`proc.wait()` blocks in `waitpid`: a signal taken by another thread, as the kernel
    does when the main thread already has one pending, leaves its handler waiting for the
    child to end; for the warden's hang-up that is never.) The wait blocks: no polling.

    The child's pidfd and the signal wake-up fd, in one `select`. Without pidfds (Linux before
    5.3) it is `proc.wait()`."""
    try:
        child = os.pidfd_open(proc.pid)
    except OSError:
        return proc.wait()
    woken, waker = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous = signal.set_wakeup_fd(waker, warn_on_full_buffer=False)
    try:
        while proc.poll() is None:
            select.select([child, woken], [], [])
            with suppress(BlockingIOError):
                os.read(woken, 512)  # (the handlers run here, in this thread, as it goes on)
    finally:
        signal.set_wakeup_fd(previous)
        for fd in (child, woken, waker):
            os.close(fd)
    return proc.returncode


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


def start_gated(
    executable: str,
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    started: Callable[[int, bool], None],
    *,
    output: int,
    pass_fds: tuple[int, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start a command in a session of its own without forking Python, so it is safe in a
    process with threads: `/bin/sh` waits on a gate pipe (its stdin) until `started(pid, True)`
    has recorded it, then becomes the command (`exec`, the same pid), with stdin from
    /dev/null. If `started` raises, the gate closes and the shell exits 125 without running
    anything."""
    import subprocess  # not on `exec`'s path, which forks itself

    gate_read, gate_write = os.pipe()
    script = 'read -r _ || exit 125; exec "$@" </dev/null'
    try:
        proc = subprocess.Popen(
            ["/bin/sh", "-c", script, "laneboard-gate", executable, *argv[1:]],
            cwd=cwd,
            env=env,
            stdin=gate_read,
            stdout=output,
            stderr=output,
            start_new_session=True,
            pass_fds=pass_fds,
        )
    finally:
        os.close(gate_read)
    try:
        started(proc.pid, True)
    except BaseException:
        os.close(gate_write)
        proc.wait()
        raise
    os.write(gate_write, b"go\n")
    os.close(gate_write)
    return proc


def stop_group(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End a command started by `start_gated` and everything in its session (its process
    group): SIGTERM, then SIGKILL to what is left after `grace` seconds. Returns once the group
    is empty, not merely its leader: a member that takes its time to quit still counts."""
    import time

    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()  # reap the leader, so that it does not count as a member
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)
    proc.poll()


def signal_each(processes: Mapping[int, int | None], signum: int) -> None:
    """Send `signum` to each of `processes` (pid: start time) that is still the process it
    names: a pid reused by another program since is left alone."""
    for pid, start in processes.items():
        if procs.alive(pid, start):
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def end(processes: Mapping[int, int | None], grace: float = 5.0) -> bool:
    """End each of `processes` (pid: start time): SIGTERM, then SIGKILL to those still there
    after `grace` seconds. True once none is left; False when some outlive SIGKILL by `grace`
    (stuck in the kernel)."""
    import time

    left = dict(processes)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        signal_each(left, signum)
        deadline = time.monotonic() + grace
        while True:
            left = {pid: start for pid, start in left.items() if procs.alive(pid, start)}
            if not left:
                return True
            if time.monotonic() > deadline:
                break
            time.sleep(0.02)
    return False
