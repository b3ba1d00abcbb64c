"""The agent runtime on tmux (DESIGN.md section 9, ../shared/AGENTS.md section 4).

Implements `core.domain.runtime.Runtime` by running tmux's own command line, one process per
call, as libtmux's `Server.cmd` does, without importing libtmux: its import alone costs 100 to
125 ms (measured), more than a whole `laneboard show`, and its object layer issues one tmux
process per object, which a refresh cannot afford. (The tests' private servers come from
libtmux's pytest plugin.) Every pane is named by its id (`%12`), never by a name. A refresh is
one `list-panes -a`; screens are read with one chained invocation for all the panes that need
one (`capture_many`).

An agent's pane command is `domain.agents.pane_argv`: a `sh` that runs the agent's argv and
records its exit status.

The argv goes to tmux as separate arguments, which tmux executes directly (no shell parses
it, nothing is quoted). A window is first made with an inert placeholder so that
`remain-on-exit` is on before the agent starts (an agent that exits at once still leaves its exit
status and screen), then `respawn-pane` starts the agent in it; `resume` respawns the same pane,
so the pane id lives as long as the window.

Server: the user's default tmux server (the one `$TMUX` names inside tmux), unless a socket is
given (`LANEBOARD_TMUX_SOCKET` or config): a name (`-L`) or, with a `/`, a path (`-S`).
Thread-safety: every call is one tmux process; nothing is cached but the socket's path.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import MARKERS
from laneboard.core.domain.runtime import LaunchSpec, PaneRef, PaneState, StopResult, same_pane
from laneboard.sessions.shims import write_shims

MIN_VERSION = (3, 2, "a")
PLACEHOLDER = ("sleep", "2147483647")
"""What a new window runs until the agent is respawned into it."""
MARK = "@@laneboard-pane "
"""Separates the panes' screens in a chained capture."""
FIELDS = (
    "#{pane_id}",
    "#{pane_dead}",
    "#{pane_dead_status}",
    "#{pane_pid}",
    "#{window_activity}",
    "#{session_id}",
    "#{window_id}",
    "#{pid}",
    "#{@lb_task}",
    "#{pane_current_command}",
)
FORMAT = "\t".join(FIELDS)


class Separator(str):
    """tmux's `;` between chained commands (every other `;` is passed literally)."""


SEP = Separator(";")


def _captures(panes: list[PaneRef], lines: int, *, colour: bool = False) -> list[str]:
    """Chained tmux commands printing each pane's id behind `MARK`, then its last `lines`
    lines. The id goes through tmux's own format: display-message runs its text through
    strftime, which would eat a literal `%3`."""
    escapes = ["-e"] if colour else []
    args: list[str] = []
    for pane in panes:
        if args:
            args.append(SEP)
        args += ["display-message", "-p", "-t", pane.pane_id, MARK + "#{pane_id}", SEP]
        args += ["capture-pane", "-p", *escapes, "-J", "-t", pane.pane_id, "-S", str(-lines)]
    return args


def _screens(lines: Iterable[str]) -> dict[str, str]:
    """The screens in the output of `_captures`, by pane id."""
    screens: dict[str, str] = {}
    current: str | None = None
    for line in lines:
        if line.startswith(MARK):
            current = line[len(MARK) :]
            screens[current] = ""
        elif current is not None:
            screens[current] += line + "\n"
    return screens


BACK_KEY = "F12"
"""The key that brings the operator back to the board from a task's pane."""
BACK_HINT = f" {BACK_KEY}: back to the board "


def _literal(arg: str) -> str:
    """`arg` as tmux's command line reads it back exactly: tmux takes an argument that ends in
    `;` as a command separator (and `\\;` as a literal `;`), so a trailing `;` of any argument
    that is not `SEP` (an agent's argv, a prompt, a path) gets a backslash before it."""
    if isinstance(arg, Separator) or not arg.endswith(";"):
        return arg
    return arg[:-1] + "\\;"


class Result(NamedTuple):
    returncode: int
    stdout: list[str]
    stderr: list[str]


class TmuxError(LaneboardError):
    """tmux is missing, too old, or refused a command."""


def version(tmux: str = "tmux") -> tuple[int, int, str]:
    """tmux's version as (major, minor, letter); `TmuxError` when it is missing or unreadable."""
    found = shutil.which(tmux)
    if found is None:
        raise TmuxError("tmux is not installed; laneboard runs agents in tmux (3.2a or newer)")
    out = subprocess.run([found, "-V"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"(\d+)\.(\d+)([a-z]?)", out)
    if match is None:
        raise TmuxError(f"cannot read tmux's version from {out.strip()!r}")
    return int(match[1]), int(match[2]), match[3]


def check_version(found: tuple[int, int, str]) -> None:
    if found < MIN_VERSION:
        have = f"{found[0]}.{found[1]}{found[2]}"
        raise TmuxError(f"tmux {have} is too old; laneboard needs tmux 3.2a or newer")


class TmuxRuntime:
    """Agents in panes of one tmux server. `socket`: None (the default server), a name, or a
    path (with a `/`)."""

    def __init__(self, socket: str | None = None) -> None:
        self.socket = socket
        self._checked = False
        if socket and "/" in socket:
            self._where = ["-S", socket]
        elif socket:
            self._where = ["-L", socket]
        else:
            self._where = []

    @property
    def socket_path(self) -> str:
        """The server's socket, as tmux resolves it (recorded in the ledger with each pane)."""
        if self.socket and "/" in self.socket:
            return str(Path(self.socket).absolute())
        if not self.socket and os.environ.get("TMUX"):
            return os.environ["TMUX"].split(",")[0]
        base = Path(os.environ.get("TMUX_TMPDIR") or "/tmp") / f"tmux-{os.getuid()}"
        return str(base / (self.socket or "default"))

    def _run(self, *args: str, stdin: str | None = None) -> Result:
        """One tmux invocation; `TmuxError` when tmux is missing or too old."""
        if not self._checked:
            check_version(version())
            self._checked = True
        # Never a lease's id: a tmux server this starts would hand it to every pane it ever
        # runs, and an agent's session would hold the lane of the command that started it.
        env = {key: val for key, val in os.environ.items() if key not in MARKERS}
        try:
            done = subprocess.run(
                ["tmux", *self._where, *map(_literal, args)], capture_output=True, text=True,
                check=False, errors="surrogateescape", input=stdin, env=env,
            )  # fmt: skip
        except FileNotFoundError:
            raise TmuxError("tmux is not installed; laneboard runs agents in tmux") from None
        return Result(done.returncode, done.stdout.splitlines(), done.stderr.splitlines())

    def _cmd(self, *args: str) -> list[str]:
        result = self._run(*args)
        if result.returncode != 0:
            raise TmuxError(f"tmux {args[0]}: {' '.join(result.stderr) or 'failed'}")
        return list(result.stdout)

    def _ref(self, pane_id: str, session_id: str | None, window_id: str | None) -> PaneRef:
        return PaneRef(pane_id, self.socket_path, session_id, window_id)

    # --- reading -------------------------------------------------------------------------

    def snapshot(self) -> Mapping[str, PaneState]:
        """Every pane of the server, by pane id; empty when no server runs."""
        try:
            result = self._run("list-panes", "-a", "-F", FORMAT)
        except TmuxError:
            return {}  # without tmux no pane exists: every task's runtime is lost
        if result.returncode != 0:
            return {}  # no server (or no sessions): no panes
        return self._panes(result.stdout)

    def started(self) -> float | None:
        """When the server started (its `start_time`); None when no server runs (never starts
        one)."""
        try:
            result = self._run("display-message", "-p", "#{start_time}")
        except TmuxError:
            return None
        text = result.stdout[0].strip() if result.returncode == 0 and result.stdout else ""
        return float(text) if text.isdigit() else None

    def _panes(self, lines: Iterable[str]) -> dict[str, PaneState]:
        panes: dict[str, PaneState] = {}
        for line in lines:
            parts = line.split("\t", len(FIELDS) - 1)
            if len(parts) != len(FIELDS):
                continue
            pane_id, dead, status, pid, activity, session_id, window_id, server, task, command = (
                parts
            )
            panes[pane_id] = PaneState(
                ref=PaneRef(
                    pane_id,
                    self.socket_path,
                    session_id,
                    window_id,
                    int(server) if server.isdigit() else None,
                ),
                alive=dead != "1",
                exit_status=int(status) if dead == "1" and status.lstrip("-").isdigit() else None,
                pid=int(pid) if pid.isdigit() else None,
                command=command or None,
                activity=float(activity) if activity.isdigit() else None,
                task_id=task or None,
            )
        return panes

    def look(
        self, panes: Iterable[PaneRef], lines: int
    ) -> tuple[Mapping[str, PaneState], dict[str, str]]:
        """`snapshot` and the screens of `panes` (as `capture_many`), in one tmux invocation:
        what one refresh of a few agents costs (a hook event's: one process, not two)."""
        wanted = list(panes)
        if not wanted:
            return self.snapshot(), {}
        try:
            result = self._run("list-panes", "-a", "-F", FORMAT, SEP, *_captures(wanted, lines))
        except TmuxError:
            return {}, {}
        if result.returncode != 0:  # no server, or a pane gone meanwhile: one by one
            return self.snapshot(), self.capture_many(wanted, lines)
        first = next((n for n, line in enumerate(result.stdout) if line.startswith(MARK)), None)
        if first is None:
            return self._panes(result.stdout), {}
        return self._panes(result.stdout[:first]), _screens(result.stdout[first:])

    def capture(self, pane: PaneRef, lines: int) -> str:
        return self.capture_many([pane], lines).get(pane.pane_id, "")

    def capture_many(
        self, panes: Iterable[PaneRef], lines: int, *, colour: bool = False
    ) -> dict[str, str]:
        """The last `lines` lines of each pane's screen (joined wrapped lines; with `colour`,
        its colours as escapes), in one tmux invocation; a pane that is gone is left out."""
        wanted = list(panes)
        if not wanted:
            return {}
        result = self._run(*_captures(wanted, lines, colour=colour))
        if result.returncode != 0 and len(wanted) > 1:
            # One pane vanished meanwhile: tmux stops at the failing command. Read one by one.
            found: dict[str, str] = {}
            for pane in wanted:
                found.update(self.capture_many([PaneRef(pane.pane_id)], lines, colour=colour))
            return found
        return _screens(result.stdout) if result.returncode == 0 else {}

    def history(self, pane: PaneRef) -> str:
        """The pane's whole scrollback and screen."""
        return "\n".join(self._cmd("capture-pane", "-p", "-J", "-t", pane.pane_id, "-S", "-"))

    # --- changing ------------------------------------------------------------------------

    def launch(self, spec: LaunchSpec) -> PaneRef:
        """Start `spec.argv` in a new window `spec.window` of session `spec.session` (made when
        missing), or, with `spec.pane` and that pane still there, again in that pane."""
        if spec.shims is not None:
            plan = spec.shims
            write_shims(
                plan.task_id, plan.task_name, Path(plan.root), list(plan.commands),
                Path(plan.directory),
            )  # fmt: skip
        pane_id: str | None = None
        if spec.pane is not None:
            seen = self.snapshot().get(spec.pane.pane_id)
            if seen is not None and same_pane(spec.pane, seen):
                pane_id = spec.pane.pane_id  # the task's own pane: start again in it
        if pane_id is None:
            pane_id = self._new_window(spec)
        env: list[str] = []
        for key, val in spec.env.items():
            env += ["-e", f"{key}={val}"]
        try:
            self._cmd(
                "set-option", "-w", "-t", pane_id, "remain-on-exit", "on", SEP,
                "set-option", "-p", "-t", pane_id, "@lb_task", spec.task_id or "", SEP,
                "respawn-pane", "-k", "-t", pane_id, "-c", spec.cwd, *env,
                *_direct(_with_path(spec.argv, spec.env)),
            )  # fmt: skip
        except TmuxError:
            if spec.pane is None:
                self._run("kill-pane", "-t", pane_id)
            raise
        state = self.snapshot().get(pane_id)
        if state is None:
            raise TmuxError(f"the pane {pane_id} vanished as it started")
        return state.ref

    def _new_window(self, spec: LaunchSpec) -> str:
        """A new window running the placeholder, in the session (made when missing; a session
        another process made meanwhile is used)."""
        fmt = "#{pane_id}"
        for _ in range(2):
            if self._run("has-session", "-t", f"={spec.session}").returncode == 0:
                made = self._run(
                    "new-window", "-d", "-P", "-F", fmt, "-t", f"={spec.session}:",
                    "-n", spec.window, "-c", spec.cwd, *PLACEHOLDER,
                )  # fmt: skip
            else:
                made = self._run(
                    "new-session", "-d", "-P", "-F", fmt, "-s", spec.session,
                    "-n", spec.window, "-c", spec.cwd, "-x", "200", "-y", "50", *PLACEHOLDER,
                )  # fmt: skip
            if made.returncode == 0 and made.stdout and made.stdout[0].startswith("%"):
                return made.stdout[0]
            if not any("duplicate session" in line for line in made.stderr):
                break
        why = " ".join(made.stderr + made.stdout) or "no pane was made"
        raise TmuxError(f"tmux could not make a window for {spec.window}: {why}")

    def send_text(self, pane: PaneRef, text: str, *, enter: bool, enter_delay: float = 0.0) -> None:
        """Deliver `text` as one paste (a tmux buffer loaded from stdin, so any length and any
        bytes; bracketed when the agent asked for bracketed paste, so several lines are one
        input), then Enter as its own key, `enter_delay` seconds later (Gemini swallows an
        Enter that follows a paste at once)."""
        if text:
            buffer = f"laneboard-{pane.pane_id.lstrip('%')}"
            loaded = self._run("load-buffer", "-b", buffer, "-", stdin=text)
            if loaded.returncode != 0:
                raise TmuxError(f"tmux load-buffer: {' '.join(loaded.stderr) or 'failed'}")
            self._cmd("paste-buffer", "-p", "-d", "-b", buffer, "-t", pane.pane_id)
            if enter and enter_delay > 0:
                time.sleep(enter_delay)
        if enter:
            self._cmd("send-keys", "-t", pane.pane_id, "Enter")

    def stop(self, pane: PaneRef, timeout: float) -> StopResult:
        """Ask the agent to quit (SIGTERM to its process group), wait up to `timeout`, then
        SIGKILL every process of the pane's session (its own process groups included). The
        pane stays (dead, its screen readable). Idempotent: a pane that is dead or gone is
        stopped already."""
        state = self.snapshot().get(pane.pane_id)
        if state is None or not same_pane(pane, state):
            return StopResult(stopped=True, detail="its pane is gone")
        if not state.alive or state.pid is None:
            return StopResult(stopped=True, exit_status=state.exit_status, detail="it had exited")
        pid = state.pid
        seen = _session(pid)  # taken while its leader (the pane's process) is surely the pane's
        _signal_group(pid, signal.SIGTERM)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            state = self.snapshot().get(pane.pane_id)
            if state is None or not state.alive:
                _kill(seen)  # helpers it left behind; the pid may be reused now: only those seen
                _wait_gone(seen, 2.0)
                return StopResult(True, state.exit_status if state else None, "it quit")
            time.sleep(0.05)
        if _start(pid) == seen.get(pid):  # still the pane's leader: its session is the pane's
            seen |= _session(pid)
        _kill(seen)
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            state = self.snapshot().get(pane.pane_id)
            if (state is None or not state.alive) and not _running(seen):
                return StopResult(True, state.exit_status if state else None, "it was killed")
            time.sleep(0.05)
        left = _running(seen) or [pid]
        return StopResult(False, detail=f"pid {left[0]} still runs after SIGKILL")

    def close(self, pane: PaneRef) -> None:
        """Kill the pane if it is still there and dead (a live one is never closed here)."""
        state = self.snapshot().get(pane.pane_id)
        if state is not None and same_pane(pane, state) and not state.alive:
            self._run("kill-pane", "-t", pane.pane_id)

    def select(self, pane: PaneRef) -> None:
        """Make the pane's window current in its session, and the pane current in it."""
        self._cmd("select-window", "-t", pane.pane_id, SEP, "select-pane", "-t", pane.pane_id)

    def attach_argv(self, pane: PaneRef) -> list[str] | None:
        """Inside a client of this server: switch it to the pane (returns None). Outside:
        the argv that attaches a terminal to it (the caller runs it in the foreground). Either
        way the pane's session says how to come back (`BACK_KEY`, in its status line)."""
        self.select(pane)
        inside = os.environ.get("TMUX", "").split(",")[0]
        if inside and Path(inside).resolve() == Path(self.socket_path).resolve():
            self._offer_return(pane, "switch")
            self._cmd("switch-client", "-t", pane.pane_id)
            return None
        self._offer_return(pane, "detach")
        where = ["-S", self.socket_path]
        return ["tmux", *where, "attach-session", "-t", pane.pane_id]

    def _offer_return(self, pane: PaneRef, how: str) -> None:
        """Make `BACK_KEY` bring the operator back to the board from the pane's session:
        `detach` ends the `tmux attach` the board runs (outside tmux), `switch` switches the
        client back to the session it came from (the board's). The key is bound once for the
        server and acts only in a session that says so (`@lb_back`); anywhere else it goes to
        the pane as it always did. The session's status line names it."""
        self._cmd(
            "set-option", "-t", pane.pane_id, "@lb_back", how, SEP,
            "set-option", "-t", pane.pane_id, "status-right", BACK_HINT, SEP,
            "set-option", "-t", pane.pane_id, "status-right-length", str(len(BACK_HINT) + 2), SEP,
            "bind-key", "-n", BACK_KEY, "if-shell", "-F", "#{==:#{@lb_back},detach}",
            "detach-client",
            f"if-shell -F '#{{==:#{{@lb_back}},switch}}' 'switch-client -l' 'send-keys {BACK_KEY}'",
        )  # fmt: skip

    def shell(self, beside: PaneRef, cwd: str, env: Mapping[str, str]) -> PaneRef:
        """A plain shell for the agent in `beside`: a window of its own next to the agent's
        (`<task>-shell`; a split would share the agent window's activity clock, which the
        agent's state is read from). The one made before is selected when it is still there;
        else a new one starts in `cwd` with `env`."""
        for line in self._cmd("list-panes", "-a", "-F", "#{pane_id}\t#{@lb_shell_for}"):
            pane_id, _, owner = line.partition("\t")
            if owner == beside.pane_id:
                self.select(PaneRef(pane_id))
                return PaneRef(pane_id, self.socket_path)
        where = self._cmd(
            "display-message", "-p", "-t", beside.pane_id, "#{window_id}\t#{window_name}"
        )
        window, _, name = where[0].partition("\t")
        args: list[str] = []
        for key, val in env.items():
            args += ["-e", f"{key}={val}"]
        shell = [os.environ.get("SHELL") or "/bin/sh"]
        made = self._cmd(
            "new-window", "-a", "-P", "-F", "#{pane_id}", "-t", window,
            "-n", f"{name}-shell", "-c", cwd, *args, *_direct(_with_path(shell, env)),
        )  # fmt: skip
        pane_id = made[0]
        self._cmd("set-option", "-p", "-t", pane_id, "@lb_shell_for", beside.pane_id)
        return PaneRef(pane_id, self.socket_path)


def _with_path(argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """`argv` with `env`'s PATH set by `env` itself: tmux takes a pane's PATH from the server's
    environment whatever `-e PATH=...` says (measured on tmux 3.3a), so the task's shims and
    the confined git guard would not be first on it."""
    if "PATH" not in env:
        return list(argv)
    return ["env", f"PATH={env['PATH']}", *argv]


def _direct(argv: Sequence[str]) -> list[str]:
    """`argv` as tmux executes it directly: with one argument tmux would run it through a
    shell, so a lone command goes through `env` (which execs it, keeping the pid)."""
    if not argv:
        raise TmuxError("an empty command cannot be launched")
    return list(argv) if len(argv) > 1 else ["env", "--", *argv]


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def _stat(pid: int | str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state is [0], session [3], start
    time [19]); None when the process is gone."""
    try:
        return Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _start(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _session(sid: int) -> dict[int, str]:
    """Every live process of session `sid` (the pane's: its leader is the pane's process), by
    pid, with its start time (so that a pid reused later is never taken for it)."""
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields is not None and len(fields) > 19 and fields[3] == str(sid):
                found[int(entry.name)] = fields[19]
    return found


def _running(processes: dict[int, str]) -> list[int]:
    """Those of `processes` still running (the same process, not yet a zombie): a process
    killed, or ended with its sandbox's PID namespace, goes a moment after the signal."""
    running = []
    for pid, start in processes.items():
        fields = _stat(pid)
        if fields is not None and len(fields) > 19 and fields[19] == start and fields[0] != "Z":
            running.append(pid)
    return running


def _wait_gone(processes: dict[int, str], timeout: float) -> None:
    end = time.monotonic() + timeout
    while _running(processes) and time.monotonic() < end:
        time.sleep(0.01)


def _kill(processes: dict[int, str]) -> None:
    """SIGKILL each of `processes` that is still the same process (same start time)."""
    for pid, start in processes.items():
        if _start(pid) == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
