"""Hosts: other machines that run tasks, reached over plain ssh (DESIGN.md section 13).

A host is a name the operator chose, an ssh destination (`user@host` or an alias of an ssh
config file), optionally the ssh config file to read instead of the user's own (`ssh -F`), and
the command that runs laneboard there. laneboard runs on the host too, with its own ledger:
every operation on a remote task is that laneboard's command, run over one multiplexed ssh
connection per host. The local side only aggregates what the hosts answer; it never changes
anything of its own because of a remote task, and a host that does not answer makes its tasks
`unreachable` (never lost, failed or done).

Pure: names, the ssh command lines, a task named with its host (`build1:fix-login`), and the
values the service returns. No process is run here.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.values import value

HOST_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,62}")
"""A host's name: like a task's (lower case, digits, `.`, `_`, `-`): `HOST:TASK` reads one way."""
LOCAL = "local"
"""The machine laneboard runs on: every runtime value without a host is on it."""
SSH_FAILED = 255
"""ssh's own exit code for a failure of ssh itself (no connection, refused, lost); laneboard
never exits with it, so it is never a remote command's answer."""
UNREACHABLE = "unreachable"
"""The state `ls` and the board show for a task of a host that does not answer."""


class UnknownHost(LaneboardError):
    """No host of that name is configured."""


class Unreachable(LaneboardError):
    """The host did not answer (no connection, or no answer within the timeout). Nothing was
    changed locally because of it; the host itself may or may not have run the command when the
    connection dropped mid-way (its own ledger says)."""


@value
class Host:
    """One configured host (`[hosts.NAME]` in the user's config.toml)."""

    name: str
    destination: str
    """What ssh connects to: `user@host`, `host`, or a `Host` alias of `ssh_config`."""
    ssh_config: str | None = None
    """The ssh config file (`ssh -F`): then ssh reads neither `~/.ssh/config` nor the system's."""
    laneboard: str = "laneboard"
    """The command line that runs laneboard on the host (a path, or words for its shell)."""
    connect_timeout: float = 10.0
    """Seconds to wait for the connection to open before the host is unreachable."""
    timeout: float = 60.0
    """Seconds a read (`ls --json`) may take there before the host is called unreachable."""
    poll: float = 2.0
    """Seconds before a lost stream is opened again (and between two looks at a host whose
    laneboard cannot stream)."""
    silent: float = 20.0
    """Seconds a stream may say nothing, not even its heartbeat, before the host is
    unreachable (at least two heartbeats)."""


def check_host_name(name: str) -> None:
    if name == LOCAL:
        raise LaneboardError(f"host name {LOCAL!r} is reserved: it is this machine")
    if not HOST_NAME.fullmatch(name):
        raise LaneboardError(
            f"host name {name!r}: use lower case letters, digits, '.', '_' and '-' "
            "(at most 63, starting with a letter or digit)"
        )


def split_task(ref: str) -> tuple[str | None, str]:
    """`build1:fix-login` → (`build1`, `fix-login`); a plain task reference has no host. Task
    names, ids and branch names never hold `:`, so the split is never ambiguous."""
    host, colon, rest = ref.partition(":")
    if not colon or not HOST_NAME.fullmatch(host) or not rest:
        return None, ref
    return host, rest


TASK_ID = re.compile(r"[0-9a-f]{6,64}")
BRANCH = re.compile(r"(?!-)(?!.*\.\.)(?!.*//)[A-Za-z0-9._/+=@-]{1,200}(?<![./])")


def fetch_source(host: str, document: Mapping[str, Any]) -> tuple[str, str, str]:
    """`(task id, branch, repository)` of a host's task as `show --json` said them, checked
    before any is put into a git command here (what comes over the connection is the host's
    to choose): an id of hex digits, a plain branch name (no `:`, no `..`, no leading `-`) and
    an absolute path."""
    task_id = str(document.get("id") or "")
    branch = str(document.get("branch") or "").removeprefix("refs/heads/")
    repo = str(document.get("repo") or "")
    name = str(document.get("name") or "?")
    if not TASK_ID.fullmatch(task_id):
        raise LaneboardError(f"{host}:{name}: the host's answer has no valid task id")
    if not BRANCH.fullmatch(branch):
        raise LaneboardError(f"{host}:{name}: the host's answer names no usable branch")
    if not repo.startswith("/") or any(c in repo for c in "\0\n"):
        raise LaneboardError(f"{host}:{name}: the host's answer names no absolute repository")
    return task_id, branch, repo


def control_options(host: Host, control_path: str) -> list[str]:
    """The ssh options every connection to `host` shares: its config file, no questions asked
    (a password prompt would hang a board), the connect timeout and the shared master socket."""
    options = ["-F", host.ssh_config] if host.ssh_config else []
    return [
        *options,
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={max(1, round(host.connect_timeout))}",
        "-o",
        f"ControlPath={control_path}",
        "-o",
        "ServerAliveInterval=5",
        "-o",
        "ServerAliveCountMax=2",
    ]


def master_argv(host: Host, control_path: str, persist: float) -> list[str]:
    """Open the host's master connection in the background (`-f -N`: it forks once
    authenticated, and lives `persist` seconds after its last client)."""
    return [
        "ssh",
        *control_options(host, control_path),
        "-o",
        "ControlMaster=yes",
        "-o",
        f"ControlPersist={max(1, round(persist))}",
        "-f",
        "-N",
        host.destination,
    ]


def control_argv(host: Host, control_path: str, command: str) -> list[str]:
    """Ask the master connection (`ssh -O check` or `-O exit`); runs nothing on the host."""
    return ["ssh", *control_options(host, control_path), "-O", command, host.destination]


def remote_argv(host: Host, control_path: str, words: Sequence[str], *, tty: bool) -> list[str]:
    """Run laneboard with `words` on `host` through the master connection (or, if it died since,
    a connection of its own: never a hang on a dead socket). `-t` gives it a terminal (attach)."""
    return [
        "ssh",
        *control_options(host, control_path),
        "-o",
        "ControlMaster=no",
        *(["-t"] if tty else ["-T"]),
        host.destination,
        "--",
        remote_line(host, words),
    ]


def remote_line(host: Host, words: Sequence[str]) -> str:
    """The line the host's shell runs: its laneboard command as configured (a shell may expand
    `~` in it), then `words`, each quoted."""
    return f"{host.laneboard} {shlex.join(words)}" if words else host.laneboard


def refusal(stderr: str) -> tuple[str, list[str]]:
    """A remote laneboard's refusal as the local command line says it: its first line without
    the `laneboard: ` prefix (the local printer adds it again), and the detail lines after it."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "the host's laneboard failed and said nothing", []
    first = lines[0].removeprefix("laneboard: ")
    return first, [line.strip() for line in lines[1:]]


def ssh_reason(stderr: str) -> str:
    """ssh's own reason for a failure, in one line (its last line names the cause)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "ssh failed"


@value
class RemoteTask:
    """A task of a host as its laneboard's `ls --json` described it; `document` is that task
    object, as it came (fields are added there, never removed), and `reachable` says whether it
    is what the host says now or the last answer kept while the host does not answer."""

    host: str
    document: Mapping[str, Any]
    reachable: bool = True

    @property
    def name(self) -> str:
        return str(self.document.get("name", ""))

    @property
    def id(self) -> str:
        return str(self.document.get("id", ""))

    @property
    def qualified(self) -> str:
        """The name the local command line knows it by: `HOST:NAME`."""
        return f"{self.host}:{self.name}"

    @property
    def state(self) -> str:
        """Its lifecycle state on the host, or `unreachable` while the host does not answer."""
        return str(self.document.get("state", "")) if self.reachable else UNREACHABLE

    @property
    def last_state(self) -> str:
        """The state the host last said."""
        return str(self.document.get("state", ""))


@value
class HostTasks:
    """One host's tasks as the local side knows them: fresh from the host, or (when it did not
    answer: `error` says why) the last answer, each task then `unreachable`."""

    host: Host
    reachable: bool
    tasks: tuple[RemoteTask, ...]
    seen_at: float | None
    """When the host last answered (seconds since the epoch); None when it never did."""
    error: str | None = None
    restarted: str | None = None
    """Said once, in the first answer after the host came back, when it is not the machine (or
    the tmux server) it was: `restarted_since` says what."""


class StreamBroken(LaneboardError):
    """A host's stream said something that is not what `ls --json --follow` says: the stream is
    ended, the host shown unreachable with this reason, and the stream opened again."""


STREAM_LINE_MAX = 64 << 20
"""Bytes one line of a host's stream may take (a whole list of 200 tasks is ~400 KiB)."""


def stream_document(line: bytes) -> dict[str, Any] | None:
    """One line of a host's stream as the document it is, None for a heartbeat; `StreamBroken`
    for anything else (not JSON, too deeply nested, not an object)."""
    import json

    try:
        document = json.loads(line)
    except (ValueError, RecursionError):
        raise StreamBroken("its laneboard answered something not JSON") from None
    if not isinstance(document, dict):
        raise StreamBroken("its laneboard answered something not a document")
    return None if "alive" in document else document


def apply_stream(tasks: dict[str, dict[str, Any]], document: Mapping[str, Any]) -> None:
    """Apply a stream document to `tasks` (by id): the whole list (`schema`) replaces them, a
    change updates the tasks it holds and drops those `gone`. Checked whole before anything
    is applied: `StreamBroken` when its lists are not lists of task objects with string ids
    and of string ids."""
    given, gone = document.get("tasks", []), document.get("gone", [])
    if not isinstance(given, list) or not isinstance(gone, list):
        raise StreamBroken("its stream's tasks or gone are not lists")
    if not all(isinstance(t, dict) and isinstance(t.get("id"), str) for t in given):
        raise StreamBroken("its stream holds a task without an id")
    if not all(isinstance(g, str) for g in gone):
        raise StreamBroken("its stream's gone holds something not an id")
    if "schema" in document:
        tasks.clear()
    for task in given:
        tasks[task["id"]] = task
    for task_id in gone:
        tasks.pop(task_id, None)


STREAM_HEARTBEAT = 5.0
"""Seconds after which a host's stream (`ls --json --follow`) says it is alive if it said
nothing else; a stream silent for its host's `silent` seconds is a host that does not answer."""
STREAM_SILENT = 4 * STREAM_HEARTBEAT
"""The default of `Host.silent`, and how long a follower waits for a reader that takes
nothing before it ends."""


def restarted_since(before: Mapping[str, Any] | None, now: Mapping[str, Any]) -> str | None:
    """What a host's stream says of the machine it runs on (`{"boot": id, "tmux": start}`),
    against what it said the last time: `rebooted` (a new boot id), `tmux server restarted` (the
    same boot, another tmux server: its panes are gone), or None (a reconnect: the same machine
    and server, or nothing known to compare)."""
    if not before:
        return None
    if before.get("boot") and now.get("boot") and before["boot"] != now["boot"]:
        return "rebooted"
    if before.get("tmux") is not None and before.get("tmux") != now.get("tmux"):
        return "tmux server restarted" if now.get("tmux") is not None else "tmux server ended"
    return None


@value
class Tool:
    """One program `host check` looked for on a host."""

    name: str
    found: str | None
    """Its path (and version, when it says one), or None when it is missing."""
    needed_for: str
    """What laneboard needs it for there."""
    problem: str | None = None
    """Found, but not usable as it is (too old a git)."""

    @property
    def ok(self) -> bool:
        return self.found is not None and self.problem is None


@value
class HostCheck:
    """`host check`: whether the host answers, and each program laneboard needs there."""

    host: Host
    reachable: bool
    tools: tuple[Tool, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.reachable and all(tool.ok for tool in self.tools)


def parse_check(output: str, wanted: Sequence[tuple[str, str]]) -> tuple[Tool, ...]:
    """The tools of `host check` from its probe's output: one line per tool, `NAME<TAB>FOUND`
    (empty when missing), in the order of `wanted` (name, what it is needed for)."""
    found: dict[str, str] = {}
    for line in output.splitlines():
        name, tab, rest = line.partition("\t")
        if tab:
            found[name] = rest.strip()
    tools = []
    for name, needed_for in wanted:
        seen = found.get(name) or None
        tools.append(Tool(name, seen, needed_for, _problem(name, seen)))
    return tuple(tools)


GIT_NEEDED = (2, 38)
"""`git merge-tree --write-tree` (finalize, the radar) needs git 2.38 or newer."""


def _problem(name: str, found: str | None) -> str | None:
    if name != "git" or found is None:
        return None
    match = re.search(r"git version (\d+)\.(\d+)", found)
    if match is None:
        return None
    if (int(match[1]), int(match[2])) < GIT_NEEDED:
        return f"git {match[1]}.{match[2]} is older than 2.38 (merge-tree --write-tree)"
    return None
