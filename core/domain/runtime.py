"""The runtime port: what core needs from the agent runtime (tmux), as a Protocol and values
(DESIGN.md section 9).

`sessions` implements it with libtmux; the composition root (the CLI entry, the app factory)
wires the real adapter. Every pane is named by its ref (host, socket, tmux pane id `%12`), never
by a name. `snapshot()` answers for every pane at once (one `list-panes -a` behind it), so a
refresh costs one call, not one per task. Until an adapter is wired, `NoRuntime` stands in: there
are no panes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

from laneboard.core.domain.models import Task
from laneboard.core.domain.values import field, value


@value
class PaneRef:
    """Where one agent runs. `host` is `local` until laneboard places tasks on other machines."""

    pane_id: str
    """tmux's own id, `%12`: stable for the pane's life, never reused by the server."""
    socket: str | None = None
    """The tmux socket (None: the user's default server)."""
    session_id: str | None = None
    window_id: str | None = None
    server_pid: int | None = None
    """The tmux server's pid: with the ids, it tells a pane from one a restarted server gave
    the same id."""
    host: str = "local"


@value
class PaneState:
    """One pane as the runtime sees it right now."""

    ref: PaneRef
    alive: bool
    """The pane's process runs (False: it exited and `remain-on-exit` kept its screen)."""
    exit_status: int | None = None
    pid: int | None = None
    command: str | None = None
    """tmux's `pane_current_command`: what runs in the foreground of the pane."""
    activity: float | None = None
    """When the pane's window last printed something (seconds since the epoch)."""
    task_id: str | None = None
    """The task laneboard launched this pane for (a pane option set before the agent starts),
    so a launch the ledger never heard of (its command was killed half-way) is still found."""


@value
class Shims:
    """Lane command shims the runtime writes before a launch (`sessions.shims`): `commands`
    of task `task_id` in `directory`, which the pane's PATH starts with."""

    task_id: str
    task_name: str
    root: str
    commands: tuple[str, ...]
    directory: str


@value
class LaunchSpec:
    """An agent to start as a pane's own command (an argv, never a line typed into a shell)."""

    argv: tuple[str, ...]
    cwd: str
    session: str
    window: str
    env: Mapping[str, str] = field(default_factory=dict)
    pane: PaneRef | None = None
    """Start it again in this pane (resume) when the pane is still there; else a new window."""
    shims: Shims | None = None
    task_id: str | None = None
    """The task the pane is for: tagged on the pane before the agent starts."""


@value
class StopResult:
    """How stopping a pane ended."""

    stopped: bool
    """Its processes have exited (or it was gone already)."""
    exit_status: int | None = None
    detail: str = ""


class Runtime(Protocol):
    @property
    def socket_path(self) -> str | None:
        """The server this runtime talks to (as recorded with each pane); None: no server."""
        ...

    def snapshot(self) -> Mapping[str, PaneState]:
        """Every pane laneboard can see, by pane id, in one call."""
        ...

    def started(self) -> float | None:
        """When the server started (seconds since the epoch); None when none runs. A new value
        means a new server: every pane of the old one is gone."""
        ...

    def look(
        self, panes: Iterable[PaneRef], lines: int
    ) -> tuple[Mapping[str, PaneState], dict[str, str]]:
        """`snapshot` and `capture_many(panes, lines)` in one call."""
        ...

    def launch(self, spec: LaunchSpec) -> PaneRef:
        """Start `spec.argv` as the command of a new pane; return its ref."""
        ...

    def capture(self, pane: PaneRef, lines: int) -> str:
        """The last `lines` lines of the pane's screen."""
        ...

    def capture_many(
        self, panes: Iterable[PaneRef], lines: int, *, colour: bool = False
    ) -> dict[str, str]:
        """The last lines of several panes' screens, by pane id, in one call; with `colour`,
        with their colours and attributes as ANSI escapes."""
        ...

    def history(self, pane: PaneRef) -> str:
        """The pane's whole scrollback and screen (saved to the journal on pause)."""
        ...

    def send_text(self, pane: PaneRef, text: str, *, enter: bool, enter_delay: float = 0.0) -> None:
        """Type `text` (literally) into the pane, then Enter as its own key when `enter`,
        `enter_delay` seconds after the text (some agents swallow an Enter that follows a
        paste at once)."""
        ...

    def stop(self, pane: PaneRef, timeout: float) -> StopResult:
        """Stop the pane's agent and wait up to `timeout` seconds for it to exit. Idempotent."""
        ...

    def attach_argv(self, pane: PaneRef) -> list[str] | None:
        """Show the pane to the operator: switch their tmux client to it (None), or the argv
        that attaches a terminal to it."""
        ...

    def shell(self, beside: PaneRef, cwd: str, env: Mapping[str, str]) -> PaneRef:
        """A plain shell pane beside `beside` (the existing one, or a new one)."""
        ...

    def close(self, pane: PaneRef) -> None:
        """Remove a dead pane (and its window, when it was the window's only pane). Its
        screen is gone after this: callers save it first."""
        ...


class NoRuntime:
    """No agent runtime: no panes exist, so nothing runs, nothing can be stopped or read."""

    socket_path = None

    def snapshot(self) -> Mapping[str, PaneState]:
        return {}

    def started(self) -> float | None:
        return None

    def look(
        self, panes: Iterable[PaneRef], lines: int
    ) -> tuple[Mapping[str, PaneState], dict[str, str]]:
        return {}, {}

    def launch(self, spec: LaunchSpec) -> PaneRef:
        raise NotImplementedError("no agent runtime is wired")

    def capture(self, pane: PaneRef, lines: int) -> str:
        return ""

    def capture_many(
        self, panes: Iterable[PaneRef], lines: int, *, colour: bool = False
    ) -> dict[str, str]:
        return {}

    def history(self, pane: PaneRef) -> str:
        return ""

    def send_text(self, pane: PaneRef, text: str, *, enter: bool, enter_delay: float = 0.0) -> None:
        raise NotImplementedError("no agent runtime is wired")

    def stop(self, pane: PaneRef, timeout: float) -> StopResult:
        return StopResult(stopped=True, detail="no runtime")

    def attach_argv(self, pane: PaneRef) -> list[str] | None:
        raise NotImplementedError("no agent runtime is wired")

    def shell(self, beside: PaneRef, cwd: str, env: Mapping[str, str]) -> PaneRef:
        raise NotImplementedError("no agent runtime is wired")

    def close(self, pane: PaneRef) -> None:
        return None


def pane_of(task: Task) -> PaneRef | None:
    """The pane the ledger recorded for a task (None: it has none)."""
    if not task.tmux_pane:
        return None
    return PaneRef(
        task.tmux_pane, task.tmux_socket, task.tmux_session, task.tmux_window, task.tmux_server_pid
    )


def same_pane(recorded: PaneRef, seen: PaneState) -> bool:
    """`seen` is the pane laneboard recorded, not another that a new server gave the same id:
    the same pane id on the same socket and the same server (its pid). A server never reuses a
    pane id, so a window moved to another session is still the task's pane."""
    return (
        seen.ref.pane_id == recorded.pane_id
        and seen.ref.socket == recorded.socket
        and recorded.server_pid is not None
        and seen.ref.server_pid == recorded.server_pid
    )


def pane_state(runtime: Runtime, pane: PaneRef | None) -> PaneState | None:
    """The recorded pane as the runtime sees it now; None when it is gone (or is another)."""
    if pane is None:
        return None
    seen = runtime.snapshot().get(pane.pane_id)
    return seen if seen is not None and same_pane(pane, seen) else None


def agent_processes(runtime: Runtime, pane: PaneRef | None) -> list[str]:
    """Live processes of a task's pane (`pid 42 (claude)`), for the "agent running" blocker."""
    state = pane_state(runtime, pane)
    if state is None or not state.alive:
        return []
    return [f"pid {state.pid} ({state.command or 'agent'})"]
