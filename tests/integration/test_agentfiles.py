"""The hook route each built-in profile gets (`core/adapters/agentfiles.py`), run as the agent
runs it, with payloads the real agents sent."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from laneboard.core.adapters.agentfiles import injection, last_event
from laneboard.core.domain.agents import BUILTIN
from laneboard.core.domain.models import TaskState

MAIN = "01a23784-de42-78c3-b0c4-76ed8f21d033"
TITLE = "01a23784-f88e-73f2-918c-fa80192360ac"


def _codex_payload(thread: str, message: str, answer: str) -> str:
    """What Codex CLI 0.171.0 passed to its notify command (as its last argument)."""
    return json.dumps(
        {
            "type": "agent-turn-complete", "thread-id": thread, "turn-id": "01a23784-f8b1",
            "cwd": "/w", "client": "codex-tui", "input-messages": [message],
            "last-assistant-message": answer,
        },
        separators=(",", ":"),
    )  # fmt: skip


def test_codex_title_thread_is_dropped_and_its_first_thread_is_the_conversation(
    tmp_path: Path,
) -> None:
    """Issue 21, item 3: Codex fires agent-turn-complete from its title-generating side thread
    too, with another thread-id (before or after the real turn's); laneboard kept the newest
    and `codex resume` died with "No saved session found with ID ..."."""
    args, env = injection(BUILTIN["codex"], tmp_path, "task1")
    notify = json.loads(args[1].removeprefix("notify="))
    title = _codex_payload(
        TITLE,
        "Generate a concise, single-line task title of at most 36 characters and under five "
        "words where possible.\n\nUser prompt:\nfix the login",
        "Fix the login",
    )
    for payload in (title, _codex_payload(MAIN, "fix the login", "done"), title):
        subprocess.run([*notify, payload], env={**os.environ, **env}, check=True)
    lines = Path(env["LANEBOARD_EVENTS"]).read_text().splitlines()
    assert lines == [f"agent-turn-complete\t{MAIN}\t-"]
    event = last_event(tmp_path, "task1")
    assert event is not None and event.first_conversation == event.conversation == MAIN


def test_aider_gets_notifications_and_keeps_its_history_in_the_state_dir(tmp_path: Path) -> None:
    """Issue 21, item 5: `--notifications-command` runs only with `--notifications`; aider's
    history files landed in the worktree and discard then refused."""
    args, _ = injection(BUILTIN["aider"], tmp_path, "task1")
    assert args[:2] == ["--notifications", "--notifications-command"]
    for flag in ("--chat-history-file", "--input-history-file"):
        path = Path(args[args.index(flag) + 1])
        assert path.parent.is_dir() and path.is_relative_to(tmp_path / "agentdata" / "task1")


def test_a_conversation_reported_before_the_agent_started_is_not_taken(tmp_path: Path) -> None:
    """Issue 25 (`rewind --fork`): the forked agent's old run reported its conversation last
    (its SessionEnd); until the new run's first hook, the controller must not put the old id
    back in place of the forked one, so only an event after the agent's start counts."""
    from laneboard.core.adapters.config import state_dir
    from laneboard.core.operations.steps.agentstate import conversation_reported
    from tests.tui.boards import NOW, task

    args, env = injection(BUILTIN["claude"], state_dir(), "task1")
    hook = json.loads(Path(args[args.index("--settings") + 1]).read_text())
    command = hook["hooks"]["SessionEnd"][0]["hooks"][0]["command"]
    payload = json.dumps({"session_id": MAIN, "hook_event_name": "SessionEnd", "cwd": "/w"})
    subprocess.run(["sh", "-c", command], input=payload, text=True, env={**os.environ, **env})
    os.utime(env["LANEBOARD_EVENTS"], (NOW - 10, NOW - 10))
    forked = task(
        1, "t", TaskState.RUNNING, id="task1", conversation_id=TITLE, agent_started_at=NOW
    )
    assert conversation_reported(forked, BUILTIN["claude"]) == MAIN  # any time: the old one
    assert conversation_reported(forked, BUILTIN["claude"], since=NOW) is None
