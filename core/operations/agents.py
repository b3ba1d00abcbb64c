"""A task's agent in its pane: start (and resume), watch, pause, and the queue (DESIGN.md
sections 6 and 9).

Starting verifies the worktree first and launches nothing when it fails. The agent gets the
task's environment (`environment`), its hooks routed to the task's event file
(`adapters.agentfiles`), and a pinned conversation id when its profile can take one; a profile
that cannot (Codex, opencode) has the id captured from its first hook event. What the agent is
doing is `domain.agents.detect` over one runtime snapshot, the last hook event and the screen;
`observe_all` reads those for many tasks with one `list-panes` and one chained capture.

`reconcile` is the one writer of what the runtime did on its own: an agent that exited moves
its task to `ready_for_review` (its code and last screen journalled), queued tasks start while
`agents.max_running` allows. The controller (`laneboard supervise`, the board) runs it every
second; commands that change agents run it too, so nothing depends on a controller running.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from laneboard.core.adapters import agentfiles, faults, locks
from laneboard.core.adapters.config import Settings, state_dir
from laneboard.core.adapters.ledger import Ledger
from laneboard.core.adapters.repo import RepoContext
from laneboard.core.domain.agents import (
    EXIT_EVENT,
    HOOK_STATES,
    AgentState,
    Hooks,
    Profile,
    Prompt,
    State,
    custom,
    launch_argv,
    pane_argv,
    profiles,
    read_screen,
    ready_for_prompt,
    session_name,
)
from laneboard.core.domain.confine import no_maintenance
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import Actor, Task, TaskState
from laneboard.core.domain.runtime import (
    LaunchSpec,
    PaneRef,
    Runtime,
    Shims,
    pane_of,
    pane_state,
)
from laneboard.core.domain.values import asdict
from laneboard.core.operations.steps.agentstate import (
    CUSTOM,
    SCREEN_LINES,
    AgentError,
    conversation_reported,
    profile_of,
)
from laneboard.core.operations.steps.cancelling import NOT_STARTED, cancel_requested, ever_started
from laneboard.core.operations.steps.stopping import stop_unrecorded

READY_WAIT = 10.0
"""How long a typed first prompt waits for the agent's screen to settle."""
STARTING = 60.0
"""Seconds after an agent's start (or resume) in which `send` waits for its screen to settle."""
SUBMIT_WAIT = 2.0
"""Seconds a typed text waits for the agent to be seen taking it before Enter is sent again."""
ENTER_AGAIN = 2
RETYPE_MOST = 200
"""A text this long at most, on one line, shows whole on the screen when an agent keeps it."""
PROMPT_HOOKS = frozenset({Hooks.CLAUDE, Hooks.OPENCODE})
"""Agents whose hooks (or event stream) report a prompt taken as soon as it is: believed
alone (their screens move while they load and drop what is typed)."""
PROMPT_DEFERRED = "agent.prompt_deferred"
"""The journal's word that a starter gave up typing the first prompt: the controller types it."""
STARTABLE = (
    TaskState.PROVISIONED,
    TaskState.QUEUED,
    TaskState.PAUSED,
    TaskState.RETAINED,
    TaskState.READY_FOR_REVIEW,
    TaskState.RUNNING,
)


def choose(settings: Settings, agent: str | None, command: list[str] | None) -> tuple[str, Profile]:
    """The profile `new`/`start` run: `--cmd`, `--agent`, or config `agents.default`; refused
    (before anything is created) when its program is not installed."""
    if command:
        profile = custom(command)
        name = CUSTOM
    else:
        name = agent or settings.agents.default
        known = profiles(settings.agents.profiles)
        if name not in known:
            raise AgentError(f"no agent profile named {name!r} (known: {', '.join(sorted(known))})")
        profile = known[name]
    program = profile.command[0]
    import shutil  # only when an agent is chosen: `ls` imports this module

    if shutil.which(program) is None:
        raise AgentError(
            f"{program} is not installed (not on PATH); pick another with --agent or --cmd, "
            "or create the task with --no-start"
        )
    return name, profile


def environment(ctx: RepoContext, task: Task, profile: Profile, shims: Path) -> dict[str, str]:
    """What every pane of the task gets on top of the tmux server's environment: who it is,
    the lane shims first on PATH, config's extras, and git settings that keep repository-wide
    maintenance (`gc.auto`, `maintenance.auto`) from running inside a task."""
    env = {
        "LANEBOARD_TASK": task.id,
        "LANEBOARD_TASK_NAME": task.name,
        "LANEBOARD_REPO": str(ctx.root),
        "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    }
    if os.environ.get("LANEBOARD_HOME"):
        env["LANEBOARD_HOME"] = os.environ["LANEBOARD_HOME"]
    env.update(no_maintenance(os.environ))
    env.update(ctx.settings.env)
    env.update(profile.env)
    return env


def shim_dir(task: Task) -> Path:
    return state_dir() / "shims" / task.id / "bin"


def start(
    ctx: RepoContext,
    ledger: Ledger,
    runtime: Runtime,
    task: Task,
    actor: Actor,
    *,
    kind: str = "agent.started",
    fork: bool = False,
) -> Task:
    """Start the task's agent in its window, now (the caller checked capacity). A task whose
    agent ran before resumes its pinned conversation, in the same pane when that still exists;
    with `fork`, a new conversation that starts as a copy of it (the old one is left as it
    was, and the task pins the new one). Nothing starts in a worktree that fails
    verification."""
    # Only a start needs these (the sandbox, the warden, ids): `ls` and the board never pay
    # for importing them.
    import uuid

    from laneboard.core.adapters import vault, warden
    from laneboard.core.operations.steps import confinement

    if task.state not in STARTABLE:
        raise AgentError(f"{task.name} is {task.state.value}; its agent cannot start")
    handoff = task.state in NOT_STARTED and not ever_started(ledger, task)
    if handoff and cancel_requested(ledger, task.id):
        raise AgentError(
            f"{task.name} was cancelled; no agent started (`laneboard cancel {task.name}` "
            "finishes the cancel)"
        )
    verdict = ctx.verify(task)
    if not verdict.ok:
        raise AgentError(
            f"{task.name}: no agent started: the worktree fails verification: {verdict}"
        )
    profile = profile_of(ctx.settings, task)
    states = state_dir()
    resuming = task.agent_started_at is not None
    # The newest id its hooks reported (Claude's /clear starts another), though no refresh
    # recorded it yet.
    conversation = conversation_reported(task, profile) or task.conversation_id
    forked_from = None
    if fork:
        if not profile.fork or conversation is None or not resuming:
            raise AgentError(f"{task.name}: {profile.name} has no conversation laneboard can fork")
        forked_from, conversation = conversation, str(uuid.uuid4())
    if conversation is None and profile.pin:
        conversation = str(uuid.uuid4())
    argv = launch_argv(
        profile,
        conversation=conversation,
        prompt=task.agent_prompt,
        resuming=resuming and conversation is not None,
        forking=forked_from,
    )
    hook_args, hook_env = agentfiles.injection(profile, states, task.id)
    by_subcommand = resuming and conversation and profile.resume_command and not fork
    at = 1 if by_subcommand else len(profile.command)
    argv[at:at] = hook_args
    shims = shim_dir(task)
    env = environment(ctx, task, profile, shims) | hook_env
    if runtime.socket_path:  # a laneboard run in the pane (a child spawned) uses this server
        env.setdefault("LANEBOARD_TMUX_SOCKET", runtime.socket_path)
    previous = pane_of(task)
    assert task.admin_name is not None
    if ctx.settings.confine.mode != "off":
        task = confinement.own_namespace(ledger, ctx.root, task, actor)
    box = confinement.for_task(
        ctx.settings.confine.mode,
        ledger.database,
        ctx.common_dir,
        task,
        confinement.channel_dir(task.id),
    )
    if box.decision.refused:
        raise AgentError(f"{task.name}: no agent started: {box.decision.note}")
    box = confinement.with_private(box, task, profile.private)
    command = pane_argv(argv)
    if box.layout is not None:
        command = warden.argv(
            {
                "task": task.id,
                "name": task.name,
                "repo_id": ctx.repo.id,
                "bwrap": box.bwrap,
                "layout": asdict(box.layout),
                "command": argv,
                "cwd": task.worktree_path,
                "common_dir": str(ctx.common_dir),
                "objects": str(box.objects),
                "refs": [str(p) for p in box.refs],
                "vault": str(vault.path(states, ctx.repo.id)),
                "events": str(agentfiles.events_path(states, task.id)),
                "state": str(states),
                "ledger": str(ledger.database.path),
                "slots": ctx.settings.lanes.slots,
                "cap": ctx.settings.lanes.repo_cap,
            }
        )
    spec = LaunchSpec(
        argv=tuple(command),
        cwd=task.worktree_path,
        session=session_name(ctx.repo.name),
        window=task.name,
        env=env,
        pane=previous,
        shims=Shims(task.id, task.name, str(ctx.root), tuple(ctx.settings.lanes.wrap), str(shims)),
        task_id=task.id,
    )
    stop_unrecorded(runtime, task)
    began = time.time()
    ref = runtime.launch(spec)
    faults.checkpoint("agent.before_handoff")
    typed = bool(task.agent_prompt) and profile.prompt is not Prompt.ARGV and not resuming
    if task.state is TaskState.READY_FOR_REVIEW:
        task = ledger.update_task(
            task.id, actor=actor, kind="task.revising", state=TaskState.REVISING, expect=task.state
        )
    try:
        started = ledger.update_task(
            task.id,
            actor=actor,
            kind=kind,
            # The first start hands the worktree to the agent: from this event on, a cancel
            # keeps every file (`operations.cancel`).
            data={
                "argv": argv,
                "pane": ref.pane_id,
                "conversation": conversation,
                **({"forked_from": forked_from} if forked_from else {}),
                **({"ownership": "agent"} if handoff else {}),
            },
            state=TaskState.RUNNING if task.state is not TaskState.RUNNING else None,
            expect=task.state,
            agent_argv=list(argv) if task.agent_profile != CUSTOM else task.agent_argv,
            conversation_id=conversation,
            tmux_socket=ref.socket,
            tmux_session=ref.session_id,
            tmux_window=ref.window_id,
            tmux_pane=ref.pane_id,
            tmux_server_pid=ref.server_pid,
            agent_started_at=began,
            agent_state=AgentState.STARTING.value,
            agent_exit=None,
            agent_prompt=task.agent_prompt if typed else None,
            confined=box.decision.confined,
            confine_note=box.decision.note,
        )
    except LaneboardError:
        runtime.stop(ref, timeout=1.0)
        raise
    faults.checkpoint("agent.after_handoff")
    return started


def deliver_prompt(
    ledger: Ledger, runtime: Runtime, task: Task, actor: Actor, profile: Profile
) -> Task:
    """Type the first prompt a just-started agent takes typed (kept in the ledger until then),
    once its screen is ready for it. Called after the start's lock is released: the wait (up
    to `READY_WAIT`) must not hold every other start back. An agent still not ready then (a
    start-up question waits for the operator) keeps the prompt in the ledger and the journal
    says so (`agent.prompt_deferred`); from then on the controller types it once the agent
    is idle (`prompt_pending`), and only it."""
    if not task.agent_prompt or task.state is not TaskState.RUNNING or pane_of(task) is None:
        return task
    if not _type_when_ready(runtime, task, task.agent_prompt, profile):
        return ledger.update_task(
            task.id, actor=actor, kind=PROMPT_DEFERRED, data={"waited": READY_WAIT}
        )
    return ledger.update_task(task.id, actor=actor, kind="agent.prompted", agent_prompt=None)


def prompt_pending(ledger: Ledger, task: Task, state: State) -> bool:
    """The controller types the first prompt now: it is still in the ledger, the agent is
    idle, and the agent's starter gave it up since this agent started (so the two never
    both type it)."""
    if not task.agent_prompt or state.state is not AgentState.IDLE:
        return False
    deferred = ledger.last_event(task.id, PROMPT_DEFERRED)
    return deferred is not None and deferred.at >= (task.agent_started_at or 0)


def _type_when_ready(runtime: Runtime, task: Task, text: str, profile: Profile) -> bool:
    """Type the first prompt once the agent's screen has settled on its idle input line
    (`ready_for_prompt`): typing into a program that is still starting loses keys, and a
    prompt typed into a start-up question answers it (aider's). False when it was not ready
    within `READY_WAIT`: nothing was typed."""
    pane = pane_of(task)
    assert pane is not None
    if not _wait_ready(runtime, pane, profile, READY_WAIT):
        return False
    _type_and_confirm(runtime, task, pane, text, profile)
    return True


def type_text(runtime: Runtime, task: Task, pane: PaneRef, text: str, profile: Profile) -> bool:
    """Type `text` and Enter into the task's agent (`laneboard send`) so that it is taken:
    an agent that started in the last `STARTING` seconds (a resume loads its conversation
    after its screen first shows) is first given up to `READY_WAIT` to settle on its input
    line; a busy agent later on is typed into at once (it queues what it is sent). Whether
    the agent was seen taking it (`_type_and_confirm`).

    In that first minute, a short one-line text that was not seen taken and is nowhere on the
    screen was dropped whole while the agent still loaded (opencode, Gemini under load): it is
    typed once more. A text kept in the input line, or taken, would be on the screen (a long
    or multi-line one may show as a placeholder, so it is never typed twice)."""
    starting = time.time() - (task.agent_started_at or 0.0) < STARTING
    if starting:
        _wait_ready(runtime, pane, profile, READY_WAIT, loaded=True)
    if _type_and_confirm(runtime, task, pane, text, profile):
        return True
    shown = text.strip()
    if not starting or "\n" in shown or not 0 < len(shown) <= RETYPE_MOST:
        return False
    probe = " ".join(shown.split())[:30]  # its start, in one line even in a narrow box
    if probe in " ".join(runtime.capture(pane, SCREEN_LINES).split()):
        return False
    return _type_and_confirm(runtime, task, pane, text, profile)


def _wait_ready(
    runtime: Runtime, pane: PaneRef, profile: Profile, within: float, *, loaded: bool = False
) -> bool:
    """Wait until the pane's screen has been still for half a second on a screen ready for a
    prompt (`ready_for_prompt`); with `loaded`, until it shows work or a question, or has
    been still on anything but a blank screen (a loaded agent: what is sent then is queued or
    answers). False when that was not within `within` seconds."""
    end = time.monotonic() + within
    last, since = "", time.monotonic()
    while time.monotonic() < end:
        screen = runtime.capture(pane, SCREEN_LINES)
        seen = read_screen(profile, screen)
        if loaded and (seen.busy or seen.waiting):
            return True
        if screen != last:
            last, since = screen, time.monotonic()
        elif time.monotonic() - since >= 0.5 and (
            not seen.blank if loaded else ready_for_prompt(profile, screen)
        ):
            return True
        time.sleep(0.1)
    return False


def _type_and_confirm(
    runtime: Runtime, task: Task, pane: PaneRef, text: str, profile: Profile
) -> bool:
    """Paste `text`, then Enter; then look for `SUBMIT_WAIT` seconds for the agent taking it
    (`_taken`). Without a sign, Enter again (at most `ENTER_AGAIN` times): an agent that is
    still loading may keep the paste and drop the Enter (Claude right after a resume), and an
    Enter into an empty input line is ignored by every built-in agent (an open question is
    never answered by it: a question on the screen counts as taken). Whether it was seen
    taken."""
    since = time.time()
    runtime.send_text(pane, text, enter=False)
    if profile.enter_delay > 0:
        time.sleep(profile.enter_delay)
    # An agent whose hooks report a prompt taken is believed on that alone; for the others the
    # screen moving after the Enter is a sign too.
    before = None if profile.hooks in PROMPT_HOOKS else runtime.capture(pane, SCREEN_LINES)
    runtime.send_text(pane, "", enter=True)
    for _again in range(ENTER_AGAIN):
        if _taken(runtime, task, pane, profile, since, before):
            return True
        runtime.send_text(pane, "", enter=True)
    return _taken(runtime, task, pane, profile, since, before)


TAKING = frozenset(HOOK_STATES) - {"SessionStart", "SessionEnd"}
"""Hook events that say the agent took what it was sent (its turn began, asked, or ended); a
session starting or ending, or a notification, does not."""
ENDING = frozenset({"SessionEnd", EXIT_EVENT})
"""Events of an agent that ended (what it was sent may have ended it)."""


def _taken(
    runtime: Runtime,
    task: Task,
    pane: PaneRef,
    profile: Profile,
    since: float,
    before: str | None,
) -> bool:
    """Whether the agent was seen taking what was typed at `since` within `SUBMIT_WAIT`: a
    hook event, a busy or asking screen, a screen no longer the one `before` the Enter (when
    given), or the agent ending (there is no Enter to give it then)."""
    end = time.monotonic() + SUBMIT_WAIT
    while True:
        event = agentfiles.last_event(state_dir(), task.id)
        if event is not None and event.at >= since and event.name in TAKING | ENDING:
            return True
        screen = runtime.capture(pane, SCREEN_LINES)
        seen = read_screen(profile, screen)
        if seen.busy or seen.waiting or (before is not None and screen != before):
            return True
        if time.monotonic() >= end:
            found = pane_state(runtime, pane)
            return found is None or not found.alive
        time.sleep(0.1)


# --- what agents are doing -------------------------------------------------------------------


def finish_exited(ledger: Ledger, runtime: Runtime, task: Task, state: State, actor: Actor) -> Task:
    """An agent that exited (or said done, when its profile says that means finished): its
    task is ready for review, with the exit code and last screen in the journal."""
    pane = pane_of(task)
    screen = runtime.capture(pane, 60) if pane is not None else ""
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="agent.exited" if state.state is AgentState.EXITED else "agent.done",
        data={"code": state.code, "screen": screen.rstrip("\n")},
        state=TaskState.READY_FOR_REVIEW,
        expect=task.state,
        agent_state=str(state),
        agent_exit=state.code,
    )


def pause(ctx: RepoContext, ledger: Ledger, runtime: Runtime, task: Task, actor: Actor) -> Task:
    """Save the pane's screen and scrollback to the journal, stop the agent (SIGTERM, then its
    processes are killed after `agents.stop_grace`), keep every file as it is.

    The stop and its record happen under the agents lock: the controller, which turns an agent
    that exited into a task ready for review, takes the same lock and reads the task again, so
    it never mistakes this stop for the agent's own exit."""
    with locks.held("agents"):
        return _pause(ctx, ledger, runtime, ledger.task(task.id), actor)


def _pause(ctx: RepoContext, ledger: Ledger, runtime: Runtime, task: Task, actor: Actor) -> Task:
    if task.state is not TaskState.RUNNING:
        raise AgentError(f"{task.name} is {task.state.value}; only a running task can pause")
    pane = pane_of(task)
    history = ""
    detail = "it had no pane"
    if pane is not None:
        history = runtime.history(pane)
        stopped = runtime.stop(pane, timeout=ctx.settings.agents.stop_grace)
        if not stopped.stopped:
            raise AgentError(f"{task.name}: its agent did not stop: {stopped.detail}")
        detail = stopped.detail
        faults.checkpoint("pause.after_stop")
    return ledger.update_task(
        task.id,
        actor=actor,
        kind="agent.paused",
        data={"screen": history.rstrip("\n"), "stop": detail},
        state=TaskState.PAUSED,
        expect=task.state,
        agent_state="paused",
    )
