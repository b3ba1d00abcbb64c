"""The files an agent's hooks talk through, all in laneboard's state dir (never in the user's
config, never in the worktree, where a file would block a later discard).

- `hooks/event.sh`: the one hook command. It appends one short line per event to the task's
  event file (`$LANEBOARD_EVENTS`): `<event>\\t<conversation id or ->\\t<detail or ->`. It is
  `sh` builtins plus, for agents that send JSON on stdin, one `cat`: about a millisecond on the
  agent's critical path, never a Python start (`bench/agents.py` measures it). It never fails the
  agent: every error is swallowed and it exits 0.
- `events/<task id>.log`: those lines. The last line and the file's time are "the last hook
  event"; the newest conversation id in it is the agent's current conversation.
- `agents/<task id>/`: per-launch settings (Claude's `--settings` file) that route the agent's
  hooks to `event.sh` (read-only inside a sandbox).
- `agentdata/<task id>/`: what an agent would otherwise write into the worktree (aider's chat
  and input history); writable inside its sandbox.

`laneboard signal` appends to the same file, so scripts and hooks take one path.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

from laneboard.core.domain.agents import Hooks, Profile
from laneboard.core.domain.values import value

EVENT_SCRIPT = r"""#!/bin/sh
# laneboard hook (written by laneboard; any change is overwritten). Appends one line to
# $LANEBOARD_EVENTS: the event, the conversation id found in the payload, a detail. Exits 0.
[ -n "$LANEBOARD_EVENTS" ] || exit 0
event=$1
payload=
case $2 in
    stdin) payload=$(cat 2>/dev/null) ;;
    arg)  # the JSON is the last argument; any between are patterns of events to drop
        eval "payload=\${$#}"
        shift 2
        while [ $# -gt 1 ]; do
            case $payload in $1) exit 0 ;; esac
            shift
        done ;;
esac
field() {  # the string value of JSON key $1 in the payload, in $v (- when absent)
    case $payload in
        *"\"$1\":\""*) v=${payload#*"\"$1\":\""} ;;
        *"\"$1\": \""*) v=${payload#*"\"$1\": \""} ;;
        *) v=-; return ;;
    esac
    v=${v%%\"*}
}
field session_id; id=$v
[ "$id" = - ] && field thread-id && id=$v
field notification_type; detail=$v
printf '%s\t%s\t%s\n' "$event" "$id" "$detail" >>"$LANEBOARD_EVENTS" 2>/dev/null
exit 0
"""

CLAUDE_EVENTS = (
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PermissionRequest",
    "Stop",
    "SessionEnd",
)

TAIL = 65536
"""How much of an event file's end is read for its last event and newest conversation id."""


@value
class HookEvent:
    """The last line of a task's event file."""

    name: str
    """The hook event (`Stop`, `PermissionRequest`, ...) or a `laneboard signal` state."""
    at: float
    """When it was written (the file's modification time)."""
    detail: str | None = None
    conversation: str | None = None
    """The newest conversation id any event reported."""
    first_conversation: str | None = None
    """The first conversation id an event reported (within the last `TAIL` bytes)."""


def events_path(state_dir: Path, task_id: str) -> Path:
    return state_dir / "events" / f"{task_id}.log"


def event_script(state_dir: Path) -> Path:
    """`hooks/event.sh`, written when missing or different."""
    path = state_dir / "hooks" / "event.sh"
    try:
        if path.read_text() == EVENT_SCRIPT:
            return path
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(EVENT_SCRIPT)
    temporary.chmod(0o755)
    os.replace(temporary, path)
    return path


def _hook_command(script: Path, event: str, payload: str = "") -> str:
    return " ".join(shlex.quote(part) for part in ("sh", str(script), event, payload) if part)


def _routed(script: Path, events: tuple[str, ...]) -> dict[str, object]:
    """Settings (Claude's and Gemini's shape) that run `event.sh` for each event, the JSON
    payload on stdin."""
    hook = {"type": "command"}
    return {
        "hooks": {
            event: [{"hooks": [{**hook, "command": _hook_command(script, event, "stdin")}]}]
            for event in events
        }
    }


def injection(profile: Profile, state_dir: Path, task_id: str) -> tuple[list[str], dict[str, str]]:
    """The arguments and environment that route `profile`'s hooks to the task's event file,
    for one launch. Writes the settings file the agent reads (in the state dir)."""
    script = event_script(state_dir)
    events = events_path(state_dir, task_id)
    events.parent.mkdir(parents=True, exist_ok=True)
    env = {"LANEBOARD_EVENTS": str(events)}
    own = state_dir / "agents" / task_id
    if profile.hooks is Hooks.CLAUDE:
        settings = _routed(script, CLAUDE_EVENTS)
        return ["--settings", str(_write(own / "claude-settings.json", settings))], env
    if profile.hooks is Hooks.CODEX:
        notify = json.dumps(["sh", str(script), "agent-turn-complete", "arg", *profile.hook_ignore])
        return ["-c", f"notify={notify}"], env
    if profile.hooks is Hooks.OPENCODE:
        port = _free_port()
        env["LANEBOARD_EVENT_STREAM"] = f"http://127.0.0.1:{port}/event"
        env["LANEBOARD_PYTHON"] = sys.executable
        return ["--port", str(port)], env
    if profile.hooks is Hooks.AIDER:
        own = agent_data(state_dir, task_id)
        return [
            "--notifications",  # without it, --notifications-command never runs
            "--notifications-command",
            _hook_command(script, "agent-turn-complete"),
            "--chat-history-file",
            str(own / "aider.chat.history.md"),
            "--input-history-file",
            str(own / "aider.input.history"),
        ], env
    # Hooks.GEMINI: Gemini reads settings given per launch (`GEMINI_CLI_SYSTEM_SETTINGS_PATH`)
    # only from a file root owns, in directories only root can write; the hooks run when the
    # operator adds them to their own settings (docs/agents.md), so nothing is injected.
    return [], env


def agent_data(state_dir: Path, task_id: str) -> Path:
    """`agentdata/<task id>/`: what the agent keeps for itself outside the worktree (aider's
    history), made now; writable inside its sandbox (`adapters.confine`), unlike `agents/`."""
    path = state_dir / "agentdata" / task_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the agent binds it a moment later).

    Chosen at random below the kernel's ephemeral range (32768 and up), so the gap between
    this check and the agent's bind cannot be filled by an outgoing connection of any
    process on the machine, which is where a port the kernel hands out comes from."""
    import random
    import socket  # only when an agent is started: every command imports this module

    for _ in range(200):
        port = random.randrange(20000, 32768)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        fallback: int = probe.getsockname()[1]
        return fallback


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, indent=2))
    os.replace(temporary, path)
    return path


def last_event(state_dir: Path, task_id: str) -> HookEvent | None:
    """The task's last hook event and newest conversation id, or None when it has none."""
    path = events_path(state_dir, task_id)
    try:
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            handle.seek(max(0, info.st_size - TAIL))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line for line in tail.split("\n")[:-1] if line]  # the last may be half-written
    if info.st_size > TAIL:
        lines = lines[1:]  # the first may be cut
    if not lines:
        return None
    name, _, rest = lines[-1].partition("\t")
    _, _, detail = rest.partition("\t")
    reported = [
        fields[1]
        for fields in (line.split("\t") for line in lines)
        if len(fields) > 1 and fields[1] not in ("", "-")
    ]
    return HookEvent(
        name=name,
        at=info.st_mtime,
        detail=detail if detail not in ("", "-") else None,
        conversation=reported[-1] if reported else None,
        first_conversation=reported[0] if reported else None,
    )


def retire_events(state_dir: Path, task_id: str) -> None:
    """Set the task's event file aside (`<task>.log.<time>`) before a fresh agent starts, so
    nothing an earlier agent reported (its conversation id) is read as this one's."""
    path = events_path(state_dir, task_id)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, path.with_name(f"{path.name}.{time.time_ns()}"))


def append_event(state_dir: Path, task_id: str, name: str) -> None:
    """What `laneboard signal` writes: the same line a hook would."""
    path = events_path(state_dir, task_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        handle.write(f"{name}\t-\t-\n")
