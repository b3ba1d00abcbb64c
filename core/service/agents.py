"""The service's agent commands: start, queue, pause, resume, send, signal, attach, shell, and
the controller's `reconcile`/`supervise` (DESIGN.md sections 6, 9 and 10).

A mixin of `Service` (kept apart so each file holds one concern); it uses the service's
per-thread ledger, its repository lookup and its runtime. Inputs are plain values, outputs
domain values, as everywhere in the service.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from laneboard.core.adapters import agentfiles, faults, locks, procs
from laneboard.core.adapters.config import Settings, load_settings, state_dir
from laneboard.core.adapters.leases import Cancel, Cancelled
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.agents import AgentState, State
from laneboard.core.domain.errors import LaneboardError, WaitTimeout
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import PaneRef, PaneState, pane_of, pane_state, same_pane
from laneboard.core.domain.views import Outcome
from laneboard.core.operations import agents
from laneboard.core.operations.steps import agentstate
from laneboard.core.service.parts import ServicePart

if TYPE_CHECKING:
    pass

SIGNALS = ("working", "waiting", "idle", "done")
"""What `laneboard signal --state` accepts."""
SEND_POLL = 0.2
PAUSABLE = (TaskState.RUNNING,)
RESUMABLE = (TaskState.PAUSED, TaskState.RETAINED, TaskState.READY_FOR_REVIEW, TaskState.RUNNING)


ENDED = frozenset({TaskState.FINALIZED, TaskState.DISCARDED, TaskState.CANCELLED})
"""States whose agent never runs again: their dead pane is only kept for its screen."""


class AgentCommands(ServicePart):
    """Agent commands over the service's ledger and runtime (mixed into `Service`)."""

    if TYPE_CHECKING:

        def checkpoint_turns(self, running: list[Task], states: dict[str, State]) -> None: ...

    # --- starting --------------------------------------------------------------------------

    def start(
        self,
        where: Path | str | int,
        task: str,
        *,
        agent: str | None = None,
        command: list[str] | None = None,
        prompt: str | None = None,
    ) -> Outcome:
        """Start the task's agent (a provisioned or retained task), or queue it when
        `agents.max_running` agents run already."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        if found.state is TaskState.QUEUED and not (agent or command or prompt):
            return self._start_or_queue(ctx, found, "agent.started")  # now, if a slot is free
        if found.state not in (TaskState.PROVISIONED, TaskState.RETAINED):
            raise LaneboardError(
                f"{found.name} is {found.state.value}; `start` is for a provisioned, retained or "
                "queued task (`resume` continues a paused one)"
            )
        return self._configure_and_start(ctx, found, agent, command, prompt)

    def _configure_and_start(
        self,
        ctx: RepoContext,
        task: Task,
        agent: str | None,
        command: list[str] | None,
        prompt: str | None,
    ) -> Outcome:
        name, _ = agents.choose(ctx.settings, agent, command)
        agentfiles.retire_events(state_dir(), task.id)  # a fresh agent: no earlier conversation
        task = self._ledger().update_task(
            task.id,
            actor=self.actor,
            kind="agent.configured",
            data={"profile": name, "command": command, "prompt": prompt},
            agent_profile=name,
            agent_argv=command if command else None,
            agent_prompt=prompt,
            conversation_id=None,
            agent_started_at=None,
        )
        return self._start_or_queue(ctx, task, "agent.started")

    def _start_or_queue(self, ctx: RepoContext, task: Task, kind: str) -> Outcome:
        """Start the task's agent now, or queue it when `agents.max_running` agents run. The
        decision and the launch hold the machine's agent lock, so two processes never both
        take the last slot, nor both launch one task; the task is read again under it and
        must still be as the caller saw it."""
        self.reconcile()
        ledger = self._ledger()
        faults.checkpoint("start.before_lock")
        with locks.held("agents"):
            now = ledger.task(task.id)
            if task.state is TaskState.QUEUED and now.state is TaskState.RUNNING:
                return Outcome(now, ctx.repo)  # the reconcile above started it
            if now.state is not task.state or now.agent_started_at != task.agent_started_at:
                raise LaneboardError(
                    f"{task.name} is {now.state.value} now; another process changed it"
                )
            max_running = load_settings(None).agents.max_running
            if self._running() >= max_running:
                if now.state is TaskState.QUEUED:
                    return Outcome(now, ctx.repo, changed=False)
                queued = ledger.update_task(
                    now.id, actor=self.actor, kind="agent.queued",
                    data={"max_running": max_running}, state=TaskState.QUEUED, expect=now.state,
                )  # fmt: skip
                return Outcome(queued, ctx.repo)
            started = agents.start(ctx, ledger, self.runtime, now, self.actor, kind=kind)
        profile = agentstate.profile_of(ctx.settings, started)
        started = agents.deliver_prompt(ledger, self.runtime, started, self.actor, profile)
        return Outcome(started, ctx.repo)

    def _running(self) -> int:
        """Agents that hold a slot: running tasks whose pane is alive (a task whose tmux
        server is gone holds none until it is resumed)."""
        panes = self.runtime.snapshot()
        count = 0
        for task in self._ledger().tasks(include_retired=False):
            if task.state is not TaskState.RUNNING:
                continue
            pane = pane_of(task)
            seen = panes.get(pane.pane_id) if pane is not None else None
            if seen is not None and pane is not None and same_pane(pane, seen) and seen.alive:
                count += 1
        return count

    # --- pausing and resuming ----------------------------------------------------------------

    def pause(self, where: Path | str | int, task: str) -> Outcome:
        """Stop the agent, keep the worktree byte for byte; its screen goes to the journal."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        if found.state is TaskState.PAUSED:
            return Outcome(found, ctx.repo, changed=False)
        self._same_server(found)
        paused = agents.pause(ctx, self._ledger(), self.runtime, found, self.actor)
        self.reconcile()  # its capacity may start a queued task
        return Outcome(paused, ctx.repo)

    def resume(self, where: Path | str | int, task: str) -> Outcome:
        """Start the agent again on its pinned conversation, in the same worktree (and pane,
        when it is still there). Also brings back an agent whose tmux server is gone."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        if found.state not in RESUMABLE:
            raise LaneboardError(f"{found.name} is {found.state.value}; it cannot be resumed")
        if found.agent_profile is None:
            raise LaneboardError(f"{found.name} never had an agent; use `laneboard start`")
        self._same_server(found)
        if found.state is TaskState.RUNNING:
            with locks.held("agents"):
                now = self._ledger().task(found.id)
                seen = pane_state(self.runtime, pane_of(now))
                if now.state is not TaskState.RUNNING or (seen is not None and seen.alive):
                    return Outcome(now, ctx.repo, changed=False)  # another process did it
                started = agents.start(
                    ctx, self._ledger(), self.runtime, now, self.actor, kind="agent.resumed"
                )
            return Outcome(started, ctx.repo)
        return self._start_or_queue(ctx, found, "agent.resumed")

    def fork(self, where: Path | str | int, task: str) -> Outcome:
        """Stop the agent (as `pause` does) and start it again on a new conversation that
        begins as a copy of its own (the profile's `fork`); the old conversation is left as
        it was, and the task pins the new one. A paused task forks only into a free slot."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        if found.state not in RESUMABLE:
            raise LaneboardError(f"{found.name} is {found.state.value}; it has no agent to fork")
        agentstate.fork_profile(ctx.settings, found)
        self._same_server(found)
        ledger = self._ledger()
        if found.state is TaskState.RUNNING:
            found = agents.pause(ctx, ledger, self.runtime, found, self.actor)
        with locks.held("agents"):
            now = ledger.task(found.id)
            if now.state is not found.state:
                raise LaneboardError(
                    f"{found.name} is {now.state.value} now; another process changed it"
                )
            max_running = load_settings(None).agents.max_running
            if self._running() >= max_running:
                raise LaneboardError(
                    f"{found.name}: {max_running} agents run (agents.max_running); its agent "
                    f"stays paused, `laneboard resume {found.name}` starts it on its conversation"
                )
            started = agents.start(
                ctx, ledger, self.runtime, now, self.actor, kind="agent.forked", fork=True
            )
        return Outcome(started, ctx.repo)

    def _same_server(self, task: Task) -> None:
        """Refuse to act on a task whose agent was started on another tmux server than this
        command talks to: it may still run there, and a second agent would share its worktree."""
        if task.tmux_socket and task.tmux_socket != self.runtime.socket_path:
            raise LaneboardError(
                f"{task.name}: its agent was started on the tmux server {task.tmux_socket}, not "
                f"{self.runtime.socket_path}; set LANEBOARD_TMUX_SOCKET={task.tmux_socket}"
            )

    def each(
        self, where: Path | str | int | None, states: tuple[TaskState, ...]
    ) -> list[tuple[Path | str | int, Task]]:
        """(repo id, task) for every live task in `states`, in one repo or all."""
        ledger = self._ledger()
        repo_id = self._open(where).repo.id if where is not None else None
        return [
            (task.repo_id, task)
            for task in ledger.tasks(repo_id, include_retired=False)
            if task.state in states
        ]

    # --- talking to an agent -----------------------------------------------------------------

    def _pane(self, ctx: RepoContext, task: Task) -> PaneRef:
        """The task's live pane, after its worktree verified (nothing is sent into, attached
        to or opened beside an agent whose worktree is not the task's)."""
        verdict = ctx.verify(task)
        if not verdict.ok:
            raise LaneboardError(
                f"{task.name}: refused: its worktree fails verification: {verdict}"
            )
        pane = pane_of(task)
        seen = pane_state(self.runtime, pane)
        if pane is None or seen is None:
            raise LaneboardError(
                f"{task.name} has no agent pane (its tmux server is gone, or it never started); "
                f"`laneboard resume {task.name}` brings it back"
            )
        if not seen.alive:
            raise LaneboardError(
                f"{task.name}: its agent is not running ({task.state.value}); "
                f"`laneboard resume {task.name}` starts it again"
            )
        return seen.ref

    def send(
        self,
        where: Path | str | int,
        task: str,
        text: str,
        *,
        when_idle: bool = False,
        timeout: float | None = None,
        cancel: Cancel | None = None,
    ) -> Outcome:
        """Type `text` into the agent, then Enter. `when_idle` waits until the agent is idle
        or waiting (never types into a busy agent); `timeout` gives up (`WaitTimeout`)."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        pane = self._pane(ctx, found)
        if when_idle:
            end = None if timeout is None else time.monotonic() + timeout
            while True:
                state = self.agent_state(found)
                if state is not None and state.state in (AgentState.IDLE, AgentState.WAITING):
                    break
                if state is None or state.state in (AgentState.EXITED, AgentState.LOST):
                    raise LaneboardError(f"{found.name}: its agent is not running ({state})")
                if end is not None and time.monotonic() > end:
                    raise WaitTimeout(f"{found.name}: its agent is still {state} after {timeout}s")
                if cancel is not None and cancel.wait(SEND_POLL):
                    raise Cancelled(f"{found.name}: sending was cancelled")
                if cancel is None:
                    time.sleep(SEND_POLL)
        pane = self._pane(ctx, found)  # again: it may have changed while we waited
        profile = agentstate.profile_of(ctx.settings, found)
        taken = agents.type_text(self.runtime, found, pane, text, profile)
        sent = self._ledger().update_task(
            found.id, actor=self.actor, kind="agent.sent", data={"text": text, "seen": taken}
        )
        unseen = (
            "its agent showed no sign of taking it (no hook event, no work or question on its "
            "screen, Enter pressed again twice): look at its pane",
        )
        return Outcome(sent, ctx.repo, notes=() if taken else unseen)

    def signal(self, task_id: str, state: str) -> None:
        """What a script says its agent is doing (`working`, `waiting`, `idle`, `done`): one
        line in the task's event file, read like a hook event."""
        if state not in SIGNALS:
            raise LaneboardError(f"unknown state {state!r}; one of {', '.join(SIGNALS)}")
        task = self._ledger().task(task_id)
        agentfiles.append_event(state_dir(), task.id, state)

    def attach(self, where: Path | str | int, task: str) -> list[str] | None:
        """Show the task's pane: switch the caller's tmux client to it (None), or the argv that
        attaches this terminal to it."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        return self.runtime.attach_argv(self._pane(ctx, found))

    def shell_argv(self, where: Path | str | int, task: str) -> list[str] | None:
        """Open the shell beside the agent (`shell`) and show it, as `attach` shows the agent:
        the caller's tmux client switched to it (None), or the argv that attaches to it."""
        return self.runtime.attach_argv(self.shell(where, task))

    def shell(self, where: Path | str | int, task: str) -> PaneRef:
        """A plain shell beside the agent, in the verified worktree, with the task's
        environment (the one opened before, if it is still there)."""
        ctx = self._open(where)
        found = self._live(ctx, task)
        pane = self._pane(ctx, found)
        profile = agentstate.profile_of(ctx.settings, found)
        env = agents.environment(ctx, found, profile, agents.shim_dir(found))
        return self.runtime.shell(pane, found.worktree_path, env)

    # --- what agents do ----------------------------------------------------------------------

    def agent_state(self, task: Task) -> State | None:
        ctx = self._open(task.repo_id)
        return self._agent_states(ctx, [task]).get(task.id)

    def _agent_states(self, ctx: RepoContext, tasks: list[Task]) -> dict[str, State]:
        """What the agents of the running tasks among `tasks` do now (read only)."""
        running = [task for task in tasks if task.state is TaskState.RUNNING and task.tmux_pane]
        if not running:
            return {}
        return agentstate.observe_all(lambda _task: ctx.settings, running, self.runtime)

    def reconcile(self, *, record: bool = False, only: Collection[str] | None = None) -> list[Task]:
        """Write down what the runtime did on its own: exited agents make their tasks ready
        for review, conversation ids their hooks reported are kept, queued tasks start while
        capacity allows. With `record` (the controller), every change of an agent's state is
        journalled too. `only` limits the look at the agents to those task ids (a hook event
        names its task: the board looks at that pane alone). Returns the tasks it changed."""
        ledger = self._ledger()
        changed: list[Task] = []
        live = (
            ledger.tasks(include_retired=False)
            if only is None
            else [t for t in ledger.tasks_by_id(only) if t.live]
        )
        running = [t for t in live if t.state is TaskState.RUNNING and t.tmux_pane]
        contexts: dict[int, RepoContext | None] = {}

        def context(repo_id: int) -> RepoContext | None:
            if repo_id not in contexts:
                try:
                    contexts[repo_id] = self._open(repo_id)
                except LaneboardError:
                    contexts[repo_id] = None
            return contexts[repo_id]

        settings: dict[int, Settings] = {}

        def settings_of(task: Task) -> Settings:
            """The task's repo settings (its agent profile's screen rules), read from the
            repo's root as the ledger records it: no git process per refresh."""
            if task.repo_id not in settings:
                try:
                    settings[task.repo_id] = load_settings(Path(ledger.repo(task.repo_id).root))
                except LaneboardError:
                    settings[task.repo_id] = load_settings(None)
            return settings[task.repo_id]

        looked = agentstate.look_at(self.runtime, running) if record or running else ({}, {})
        if record:
            self._close_retired_panes(looked[0])
        states = agentstate.observe_all(settings_of, running, self.runtime, looked)
        if record:  # the controller saves each turn's worktree (`core.service.reviewloop`)
            self.checkpoint_turns(running, states)
        for task in running:
            state = states.get(task.id)
            if state is None:
                continue
            try:
                changed += self._reconcile_one(task, state, settings_of(task), record)
            except LaneboardError:
                continue  # another process changed the task meanwhile: its change stands
        max_running = load_settings(None).agents.max_running
        queued = sorted(ledger.tasks_in_state(TaskState.QUEUED), key=lambda t: t.updated_at)
        for task in queued:
            ctx = context(task.repo_id)
            if ctx is None:
                continue
            with locks.held("agents"):
                if self._running() >= max_running:
                    break
                now = ledger.task(task.id)
                if now.state is not TaskState.QUEUED:
                    continue  # started (or stopped) by another process meanwhile
                kind = "agent.resumed" if now.agent_started_at else "agent.started"
                try:
                    began = agents.start(
                        ctx, ledger, self.runtime, now, Actor.CONTROLLER, kind=kind
                    )
                except LaneboardError as err:
                    note = f"start failed: {err}"[:200]
                    if now.agent_state != note:
                        ledger.update_task(
                            now.id, actor=Actor.CONTROLLER, kind="agent.start_failed",
                            data={"error": str(err)}, agent_state=note,
                        )  # fmt: skip
                    continue
            profile = agentstate.profile_of(ctx.settings, began)
            changed.append(
                agents.deliver_prompt(ledger, self.runtime, began, Actor.CONTROLLER, profile)
            )
        return changed

    def _close_retired_panes(self, panes: Mapping[str, PaneState]) -> None:
        """Close the dead panes of ended tasks (finalized, discarded, cancelled: retired, or
        finalized with its worktree kept), once the
        journal holds their last screen: one saved since the agent last started (its exit or
        pause saved it), else saved now in `window.closed`. Only when tmux shows a dead pane
        (in `panes`, the runtime's snapshot) that no live task owns is the ledger asked
        anything."""
        dead = {pane_id for pane_id, seen in panes.items() if not seen.alive}
        if not dead:
            return
        ledger = self._ledger()
        live = {
            t.tmux_pane
            for t in ledger.tasks(include_retired=False)
            if t.tmux_pane and t.state not in ENDED
        }
        if not dead - live:
            return
        for task in ledger.tasks(include_retired=True):
            pane = pane_of(task)
            ended = not task.live or task.state in ENDED
            if not ended or pane is None or pane.pane_id not in dead - live:
                continue
            seen = panes[pane.pane_id]
            if not same_pane(pane, seen):
                continue
            saved = False
            for event in ledger.events(task.id):
                if event.kind in ("agent.started", "agent.resumed"):
                    saved = False
                elif event.data.get("screen"):
                    saved = True
            data: dict[str, str] = {"pane": pane.pane_id}
            if not saved:
                data["screen"] = self.runtime.history(pane).rstrip("\n")
            ledger.append_event(task.id, task.repo_id, "window.closed", Actor.CONTROLLER, data)
            self.runtime.close(pane)

    def _reconcile_one(
        self, task: Task, state: State, settings: Settings, record: bool
    ) -> list[Task]:
        """What one running task's observed `state` changes in the ledger."""
        ledger = self._ledger()
        profile = agentstate.profile_of(settings, task)
        reported = agentstate.conversation_reported(
            task, profile, since=task.agent_started_at or 0.0
        )
        if reported is not None:
            task = ledger.update_task(
                task.id, actor=Actor.HOOK, kind="agent.conversation",
                data={"conversation": reported}, conversation_id=reported,
            )  # fmt: skip
        if agents.prompt_pending(ledger, task, state):
            task = agents.deliver_prompt(ledger, self.runtime, task, Actor.CONTROLLER, profile)
        if state.state is AgentState.EXITED or agentstate.said_done(task, state, profile):
            with locks.held("agents"):  # not while another process starts it again
                now = ledger.task(task.id)
                if (
                    now.state is not TaskState.RUNNING
                    or now.agent_started_at != task.agent_started_at
                ):
                    return []
                if state.state is AgentState.EXITED:
                    seen = pane_state(self.runtime, pane_of(now))
                    if seen is not None and seen.alive:
                        return []
                return [agents.finish_exited(ledger, self.runtime, now, state, Actor.CONTROLLER)]
        if record and str(state) != task.agent_state:
            noted = ledger.update_task(
                task.id, actor=Actor.CONTROLLER, kind="agent.state",
                data={"state": str(state), "source": state.source}, agent_state=str(state),
            )  # fmt: skip
            return [noted]
        return []

    def supervise(
        self,
        *,
        interval: float = 1.0,
        cancel: Cancel | None = None,
        on_change: Callable[[Task], None] | None = None,
        rounds: int | None = None,
    ) -> None:
        """Be the one controller: reconcile every `interval` seconds until cancelled (or for
        `rounds` rounds). Refused while another live process is the controller; a dead one's
        place is taken over."""
        me, start = procs.me()
        holder = self._ledger().claim_controller(me, start)
        if holder is not None:
            raise LaneboardError(f"another controller runs (pid {holder}); one at a time")
        try:
            done = 0
            while rounds is None or done < rounds:
                for task in self.reconcile(record=True):
                    if on_change is not None:
                        on_change(task)
                done += 1
                if cancel is not None:
                    if cancel.wait(interval):
                        return
                else:
                    time.sleep(interval)
        finally:
            self._ledger().release_controller(me)

    def become_controller(self) -> int | None:
        """Claim the controller's place for this process (the board, while it is open): None
        when it is ours now (a dead holder's place is taken over), else the live holder's pid.
        The caller then calls `reconcile(record=True)` on its own schedule and
        `resign_controller` when it closes."""
        me, start = procs.me()
        holder: int | None = self._ledger().claim_controller(me, start)
        return holder

    def resign_controller(self) -> None:
        """Give up the controller's place, if this process holds it."""
        self._ledger().release_controller(procs.me()[0])

    def controller(self) -> int | None:
        """The pid of the running controller, if any."""
        return self._ledger().controller()

    @staticmethod
    def tmux_socket() -> str | None:
        """The tmux server agents run on: `LANEBOARD_TMUX_SOCKET`, else config
        `agents.tmux_socket`, else None (the user's default server)."""
        return os.environ.get("LANEBOARD_TMUX_SOCKET") or load_settings(None).agents.tmux_socket
