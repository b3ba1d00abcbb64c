"""A remote task as the front ends say it: its `ls --json` object (the host's laneboard's own
words) turned into the cells `ls` prints and the board shows, each with its host, and
`unreachable` for a task of a host that does not answer (its last known state beside it)."""

from __future__ import annotations

import shlex
from typing import Any

from laneboard.core.domain.hosts import HostTasks, RemoteTask
from laneboard.tui.output import age, counts_text

HEADERS = ["NAME", "STATE", "TARGET", "WORKTREE", "LAST COMMIT", "AGENT", "LANE", "REPO"]


def state_text(task: RemoteTask, seen_at: float | None, now: float | None = None) -> str:
    """Its state there, or `unreachable (running 3m ago)`: never a guess of what it does now."""
    if task.reachable:
        agent = task.document.get("agent") or {}
        ended = agent.get("state") in ("exited", "lost")
        return str(agent["state"]) if task.last_state == "running" and ended else task.last_state
    when = f" {age(seen_at, now)} ago" if seen_at is not None else ""
    return f"unreachable ({task.last_state}{when})"


def git_text(document: dict[str, Any]) -> str:
    git = document.get("git")
    if not isinstance(git, dict):
        return ""
    if not git.get("present"):
        return f"({git.get('problem') or 'gone'})"
    counts = [int(git.get(key) or 0) for key in ("staged", "modified", "untracked", "conflicted")]
    text = counts_text(*counts)
    if git.get("ahead") is not None and git.get("behind") is not None:
        text += f", {git['ahead']} ahead, {git['behind']} behind"
    return text


def commit_text(document: dict[str, Any], now: float | None = None) -> str:
    git = document.get("git")
    last = git.get("last_commit") if isinstance(git, dict) else None
    if not isinstance(last, dict):
        return ""
    return f"{str(last.get('sha', ''))[:8]} {last.get('subject', '')}"


def agent_text(document: dict[str, Any]) -> str:
    agent = document.get("agent")
    if not isinstance(agent, dict):
        return ""
    if agent.get("state") == "lost":
        return "runtime lost"
    code = agent.get("exit_code")
    return f"exited({code})" if code is not None else str(agent.get("state", ""))


def lane_text(document: dict[str, Any]) -> str:
    lane = document.get("lane")
    if not isinstance(lane, dict):
        return ""
    running, waiting = lane.get("running") or [], lane.get("waiting") or []
    if running:
        return f"running `{shlex.join(running[0].get('command') or [])}`"
    if waiting:
        return "waiting"
    return "idle"


def rows(hosts: list[HostTasks], now: float | None = None) -> list[list[str]]:
    """One row per remote task, as `HEADERS` names the columns."""
    found = []
    for answer in hosts:
        for task in answer.tasks:
            document = dict(task.document)
            found.append(
                [
                    task.qualified,
                    state_text(task, answer.seen_at, now),
                    str(document.get("target") or ""),
                    git_text(document),
                    commit_text(document, now),
                    agent_text(document),
                    lane_text(document),
                    f"{task.host}:{document.get('repo', '')}",
                ]
            )
    return found


def task_json(task: RemoteTask, answer: HostTasks) -> dict[str, Any]:
    """The task's object as its host said it, with `host`, `reachable`, and `last_state`;
    `state` is `unreachable` while the host does not answer."""
    return {
        **task.document,
        "state": task.state,
        "host": task.host,
        "reachable": task.reachable,
        "last_state": task.last_state,
    }


def host_json(answer: HostTasks) -> dict[str, Any]:
    from laneboard.tui.output import iso

    return {
        "name": answer.host.name,
        "destination": answer.host.destination,
        "reachable": answer.reachable,
        "error": answer.error,
        "seen_at": iso(answer.seen_at),
    }
