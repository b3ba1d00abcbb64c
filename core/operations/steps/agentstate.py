"""What a task's agent is doing: `domain.agents.detect` over one runtime snapshot, the task's
last hook event and its screen, for many tasks with one `list-panes` and one chained capture.
Reads only; `operations.agents.reconcile` is what acts on it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from laneboard.core.adapters import agentfiles
from laneboard.core.adapters.config import Settings, state_dir
from laneboard.core.domain.agents import (
    EXIT_EVENT,
    AgentState,
    Conversation,
    Observed,
    Profile,
    State,
    custom,
    detect,
    profiles,
)
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Task
from laneboard.core.domain.runtime import PaneState, Runtime, pane_of, same_pane

CUSTOM = "custom"
"""The profile name recorded for `--cmd`: its argv is the task's `agent_argv`."""


class AgentError(LaneboardError):
    """An agent cannot be started, reached or stopped."""


SCREEN_LINES = 40


def profile_of(settings: Settings, task: Task) -> Profile:
    """The profile `task` was (or will be) started with."""
    if task.agent_profile == CUSTOM:
        return custom(task.agent_argv or ())
    known = profiles(settings.agents.profiles)
    name = task.agent_profile or settings.agents.default
    if name not in known:
        raise AgentError(f"{task.name}: no agent profile named {name!r}")
    return known[name]


Looked = tuple[Mapping[str, PaneState], dict[str, str]]
"""A runtime's `look`: every pane, and the screens of the panes asked for."""


def look_at(runtime: Runtime, tasks: list[Task]) -> Looked:
    """One `look` at the runtime: every pane, and the screens of `tasks`' panes."""
    return runtime.look([p for t in tasks if (p := pane_of(t)) is not None], SCREEN_LINES)


def observe_all(
    settings_of: Callable[[Task], Settings],
    tasks: list[Task],
    runtime: Runtime,
    looked: Looked | None = None,
) -> dict[str, State]:
    """The agent state of each task that has a pane, from one look at the runtime (`looked`,
    taken by `look_at` over these tasks or more, or one taken now) and each task's event
    file. Reads only."""
    with_pane = [task for task in tasks if task.tmux_pane]
    if not with_pane:
        return {}
    panes, captured = looked if looked is not None else look_at(runtime, with_pane)
    states = state_dir()
    alive: list[tuple[Task, PaneState]] = []
    found: dict[str, State] = {}
    now = time.time()
    for task in with_pane:
        recorded = pane_of(task)
        assert recorded is not None
        seen = panes.get(recorded.pane_id)
        if seen is None or not same_pane(recorded, seen):
            found[task.id] = State(AgentState.LOST, source="tmux")
        elif not seen.alive:
            code = seen.exit_status
            event = agentfiles.last_event(states, task.id)
            fresh = event is not None and event.at >= (task.agent_started_at or 0)
            if fresh and event and event.name == EXIT_EVENT and event.detail is not None:
                code = int(event.detail) if event.detail.isdigit() else code
            found[task.id] = State(AgentState.EXITED, code, source="tmux")
        else:
            alive.append((task, seen))
    missing = [seen.ref for _, seen in alive if seen.ref.pane_id not in captured]
    screens = {**captured, **(runtime.capture_many(missing, SCREEN_LINES) if missing else {})}
    for task, seen in alive:
        event = agentfiles.last_event(states, task.id)
        started = task.agent_started_at or 0.0
        hook = hook_at = None
        if event is not None and event.at >= started:
            hook = event.detail if event.name == "Notification" and event.detail else event.name
            hook_at = event.at
        observed = Observed(
            alive=True,
            hook=hook,
            hook_at=hook_at,
            screen=screens.get(seen.ref.pane_id, ""),
            screen_changed_at=seen.activity,
            started_at=task.agent_started_at,
        )
        found[task.id] = detect(profile_of(settings_of(task), task), observed, now)
    return found


def fork_profile(settings: Settings, task: Task) -> Profile:
    """The profile of `task`'s agent when it can fork the conversation it had (its profile
    has `fork`, its agent ran, a conversation is known); else `LaneboardError` says why."""
    profile = profile_of(settings, task)
    if not profile.fork:
        raise LaneboardError(
            f"{task.name}: {profile.name} cannot fork its conversation (a profile's `fork`)"
        )
    if task.agent_started_at is None or not (
        task.conversation_id or conversation_reported(task, profile)
    ):
        raise LaneboardError(f"{task.name}: its agent has no conversation to fork yet")
    return profile


def conversation_reported(task: Task, profile: Profile, *, since: float = 0.0) -> str | None:
    """A conversation id the agent's hooks reported that differs from the recorded one: the
    newest, or for a profile that keeps its first (Codex, opencode: later ids are side
    threads), the first, and only while none is recorded. `since`: only from a hook event
    after then (the controller passes the agent's start: a forked agent's old conversation,
    reported by its last run, must not take the new one's place)."""
    event = agentfiles.last_event(state_dir(), task.id)
    if event is None or event.at < since:
        return None
    reported = event.conversation
    if profile.conversation is Conversation.FIRST:
        reported = None if task.conversation_id else event.first_conversation
    if reported is None or reported == task.conversation_id:
        return None
    return reported


def said_done(task: Task, state: State, profile: Profile) -> bool:
    """The agent is finished though it runs: `laneboard signal --state done` came after it
    started, or its profile says a turn's end (a hook's idle) means finished."""
    if state.state is not AgentState.IDLE:
        return False
    event = agentfiles.last_event(state_dir(), task.id)
    if event is None or event.at < (task.agent_started_at or 0):
        return False
    return event.name == "done" or (profile.stop_is_done and state.source == "hook")
