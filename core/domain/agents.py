"""Agents as data: profiles (how to launch, prompt, pin, resume and hook each agent, and the
screen rules that read its state), and the pure decision of what an agent is doing now.

Every agent-specific string lives in a profile, built in here for the agents laneboard knows
(the facts are in ../shared/AGENTS.md) and overridable in config (`[agents.profiles.<name>]`), so
a changed agent UI is fixed in config, not in a release. `detect` takes facts (the pane, the last
hook event, the screen's last lines and when they last changed, the clock) and returns a state;
it does no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from enum import StrEnum

from laneboard.core.domain.models import Task, TaskState
from laneboard.core.domain.values import field, replace, value


class Prompt(StrEnum):
    """How the first prompt reaches the agent."""

    ARGV = "argv"
    """Appended to the launch argv as its last argument."""
    TYPE = "type"
    """Typed into the pane once the agent shows its prompt (`send-keys -l`, then Enter)."""
    NONE = "none"
    """The agent takes no prompt (a shell): it is typed like `type`."""


class Hooks(StrEnum):
    """How an agent is told to report its events, per launch (never in the user's config)."""

    NONE = "none"
    CLAUDE = "claude"
    """`--settings <file>`: hooks for UserPromptSubmit, PreToolUse, PermissionRequest, Stop,
    SessionStart and SessionEnd, each appending one line to the task's event file."""
    CODEX = "codex"
    """`-c notify=[hook, "codex"]`: agent-turn-complete, with the JSON as the last argument."""
    GEMINI = "gemini"
    """Nothing injected: Gemini takes no per-launch settings from a normal user (a system
    settings file must be root's). Its hooks fire when the operator adds them to their own
    `~/.gemini/settings.json` (docs/agents.md); outside laneboard's panes they do nothing."""
    OPENCODE = "opencode"
    """`--port <free port>`: laneboard reads its server-sent events (`GET /event`) beside it
    (`session.status` busy/idle, `permission.asked`), and its session id from them."""
    AIDER = "aider"
    """`--notifications-command <hook>`: turn done."""


class Conversation(StrEnum):
    """Which of the conversation ids an agent's events report is the task's conversation."""

    NEWEST = "newest"
    """The newest: the agent moves to another one itself (Claude's `/clear`)."""
    FIRST = "first"
    """The first one reported after launch, kept from then on: later ids are side threads
    (a subagent's session, a title generator)."""


@value
class Profile:
    """How laneboard runs one kind of agent. `{id}` in an argv stands for the conversation id
    laneboard pins (a UUID), `{prompt}` for the first prompt."""

    name: str
    command: tuple[str, ...]
    prompt: Prompt = Prompt.ARGV
    pin: tuple[str, ...] = ()
    """Arguments that fix the conversation id at launch (`--session-id {id}`); empty when the
    agent picks it and its first hook event reports it."""
    resume: tuple[str, ...] = ()
    """Arguments that resume exactly the pinned conversation (`--resume {id}`); empty: the agent
    cannot resume, and `resume` starts it afresh in the same worktree."""
    resume_command: tuple[str, ...] | None = None
    """For agents whose resume is a subcommand: the whole argv, `{command}` standing for the
    profile's `command` (`{command} resume {id}`), so a `command` changed in config (another
    path to the program) resumes with it too."""
    fork: tuple[str, ...] = ()
    """Arguments that resume the conversation `{id}` as a new conversation `{new}`, leaving
    `{id}` as it was (`--resume {id} --fork-session --session-id {new}`); empty: the agent
    cannot fork its conversation."""
    prompt_args: tuple[str, ...] = ("--", "{prompt}")
    """How an `argv` prompt is passed: after `--`, so a prompt that starts with `-` is never
    read as an option."""
    hooks: Hooks = Hooks.NONE
    env: Mapping[str, str] = field(default_factory=dict)
    busy: tuple[str, ...] = ()
    """Screen patterns (regular expressions, case-insensitive) that mean it is working."""
    waiting: tuple[str, ...] = ()
    """Patterns that mean it waits for the operator (a permission, a question)."""
    idle: tuple[str, ...] = ()
    """Patterns that mean its turn is done and it waits for a prompt."""
    stop_is_done: bool = False
    """A hook's "stop" (turn done) means the task is finished, ready for review."""
    enter_delay: float = 0.0
    """Seconds between pasting text and pressing Enter: some agents swallow an Enter that
    follows a paste at once (Gemini)."""
    conversation: Conversation = Conversation.NEWEST
    private: tuple[str, ...] = ()
    """Names in the worktree's top the agent writes for itself (aider's tags cache): inside its
    sandbox each is a directory of laneboard's state (`private/<task>/<name>`, which no
    sandbox sees) bound there, so nothing of it lands in the worktree (an empty directory
    stands there while the agent runs; it is removed after)."""
    hook_ignore: tuple[str, ...] = ()
    """Shell patterns over a hook's payload: a matching event is not the agent's own (Codex
    reports its title generator's turns too), and is dropped by the hook itself."""


CLAUDE_SPINNER = "^\\s*[\u00b7\u2722\u2733\u2736\u273b\u273d*]\\s+\\S[^\u2026]*\u2026"
"""Claude's status line while it works (`✶ Waddling…`): one of its spinner glyphs, a word, an
ellipsis. Not any line ending in `…`: its idle footer says `Auto-updating…`."""

BUILTIN: dict[str, Profile] = {
    profile.name: profile
    for profile in (
        # Screens: tests/screens/claude/ (Claude Code 2.1.197).
        Profile(
            "claude",
            ("claude",),
            pin=("--session-id", "{id}"),
            resume=("--resume", "{id}"),
            fork=("--resume", "{id}", "--fork-session", "--session-id", "{new}"),
            hooks=Hooks.CLAUDE,
            busy=(r"esc to interrupt", r"ctrl\+c to interrupt", CLAUDE_SPINNER),
            waiting=(
                r"Do you want",  # to proceed? / to make this edit? / to use this API key?
                "\u276f\\s*\\d+\\.\\s",  # a numbered choice under its marker: 1. Yes
                r"Enter to confirm",
                r"Esc to cancel",
                r"Quick safety check",  # the trust dialog
                r"trust this folder",
                r"Do you trust the files in this folder\?",
            ),
            idle=("^\\s*[\u276f>]\\s*$",),
            enter_delay=0.5,
        ),
        # Screens: tests/screens/codex/ (Codex CLI 0.171.0). Its input line's placeholder
        # changes from run to run: its idle comes from its notify hook and a still screen.
        Profile(
            "codex",
            ("codex",),
            resume_command=("{command}", "resume", "{id}"),
            hooks=Hooks.CODEX,
            # Its title generator is a thread of its own that fires agent-turn-complete too
            # (before or after the real turn's): not a turn's end, not the conversation.
            hook_ignore=("*Generate a concise, single-line task title*",),
            conversation=Conversation.FIRST,
            busy=(r"esc to interrupt",),
            waiting=(
                r"press enter to confirm or esc to cancel",
                r"Would you like to run the following command\?",
                r"allow command\?",
                r"\[y/n\]",
                r"Trust this folder\?",  # folder access, before its first prompt
                r"Sign in with ChatGPT",  # the sign-in screen ("Press enter to continue")
                r"Press enter to continue",
            ),
            enter_delay=0.2,
        ),
        # Screens: tests/screens/gemini/ (Gemini CLI 0.61.0). No hooks: Gemini reads a system
        # settings file only when root owns it and every directory above it, so laneboard has
        # no per-launch route for a normal user (docs/agents.md); its state is its screen.
        Profile(
            "gemini",
            ("gemini",),
            prompt_args=("--prompt-interactive={prompt}",),
            pin=("--session-id", "{id}"),
            resume=("--resume", "{id}"),
            hooks=Hooks.NONE,
            busy=(r"esc to cancel",),
            waiting=(
                r"Allow execution",
                r"Allow once",
                r"waiting for user confirmation",
                r"Do you trust the files in this folder\?",
                r"How would you like to authenticate",
            ),
            idle=(r"Type your message",),
            enter_delay=0.5,  # an Enter right after a paste is swallowed (3 of 3)
        ),
        # Screens: tests/screens/opencode/ (opencode 1.18.33).
        Profile(
            "opencode",
            ("opencode",),
            prompt=Prompt.TYPE,
            resume=("-s", "{id}"),
            hooks=Hooks.OPENCODE,
            busy=(r"esc (to )?interrupt",),
            waiting=(r"Permission required", r"Allow once\s+Allow always\s+Reject"),
            enter_delay=0.2,
            conversation=Conversation.FIRST,  # a subagent's session comes later
        ),
        # Screens: tests/screens/aider/ (aider 0.86.2). Its chat and input history live in
        # laneboard's state dir (the hook route puts them there, one per task);
        # `--no-gitignore`: aider would add `.aider*` to the worktree's `.gitignore` otherwise.
        Profile(
            "aider",
            ("aider", "--no-gitignore", "--no-show-release-notes"),
            prompt=Prompt.TYPE,
            hooks=Hooks.AIDER,
            waiting=(r"\(Y\)es/\(N\)o",),
            # `>`, or its mode first when it is not the default: `diff>`, `ask>`, `multi>`
            idle=(r"^\s*[\w-]*>\s*$",),
            enter_delay=0.2,
            private=(".aider.tags.cache.v4",),  # its repo map's cache: no option moves it
        ),
        Profile("shell", ("/bin/sh",), prompt=Prompt.NONE, idle=(r"[$#]\s*$",)),
    )
}
"""The agents laneboard knows (../shared/AGENTS.md); config may override any field or add
profiles (`[agents.profiles.<name>]`)."""


def custom(command: Sequence[str]) -> Profile:
    """A profile for `--cmd 'CMD'`: run it as given; its state comes from tmux alone."""
    return Profile("custom", tuple(command), prompt=Prompt.TYPE)


_TUPLES = frozenset(
    {
        "command", "pin", "resume", "resume_command", "fork", "prompt_args", "busy", "waiting",
        "idle", "hook_ignore", "private",
    }
)  # fmt: skip
_ENUMS: dict[str, type[StrEnum]] = {
    "prompt": Prompt,
    "hooks": Hooks,
    "conversation": Conversation,
}


PRIVATE_NAME = re.compile(r"[\w.-]+")
"""What a profile's `private` entry may be: one plain name, no directory in it."""


def with_overrides(profile: Profile, fields: Mapping[str, object]) -> Profile:
    """`profile` with the fields a config table gives; `ValueError` names a bad field."""
    values: dict[str, object] = {}
    for key, given in fields.items():
        if key in _TUPLES:
            if not isinstance(given, list | tuple) or not all(isinstance(x, str) for x in given):
                raise ValueError(f"{key}: expected a list of strings")
            values[key] = tuple(given)
        elif key in _ENUMS:
            kind = _ENUMS[key]
            try:
                values[key] = kind(str(given))
            except ValueError:
                allowed = ", ".join(item.value for item in kind)
                raise ValueError(f"{key}: expected one of {allowed}") from None
        elif key == "env":
            if not isinstance(given, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in given.items()
            ):
                raise ValueError("env: expected a table of strings")
            values[key] = dict(given)
        elif key == "enter_delay":
            if isinstance(given, bool) or not isinstance(given, int | float) or given < 0:
                raise ValueError("enter_delay: expected a number of seconds, 0 or more")
            values[key] = float(given)
        elif key == "stop_is_done":
            if not isinstance(given, bool):
                raise ValueError("stop_is_done: expected true or false")
            values[key] = given
        else:
            raise ValueError(f"{key}: not a profile field laneboard knows")
    for name in values.get("private", ()):  # type: ignore[attr-defined]
        if not PRIVATE_NAME.fullmatch(name) or name in (".", "..", ".git"):
            raise ValueError(f"private: {name!r} is not a plain name in the worktree's top")
    for key in ("busy", "waiting", "idle"):
        for pattern in values.get(key, ()):  # type: ignore[attr-defined]
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(f"{key}: {pattern!r} is not a regular expression: {err}") from None
    if values.get("command") == ():
        raise ValueError("command: must not be empty")
    return replace(profile, **values)


def profiles(config: Mapping[str, Mapping[str, object]]) -> dict[str, Profile]:
    """The built-in profiles with config's overrides, plus config's own profiles (which need a
    `command`). `ValueError` says `<name>.<field>: what is wrong`."""
    found = dict(BUILTIN)
    for name, fields in config.items():
        base = found.get(name)
        if base is None:
            if "command" not in fields:
                raise ValueError(f"{name}.command: a new profile needs its command")
            base = Profile(name, ("true",))
        try:
            found[name] = with_overrides(base, fields)
        except ValueError as err:
            raise ValueError(f"{name}.{err}") from None
    return found


def session_name(repo_name: str) -> str:
    """The tmux session of a repository's tasks: `lb-<repo>`, in characters tmux keeps."""
    return "lb-" + (re.sub(r"[^A-Za-z0-9_-]", "-", repo_name) or "repo")


def launch_argv(
    profile: Profile,
    *,
    conversation: str | None,
    prompt: str | None,
    resuming: bool,
    forking: str | None = None,
) -> list[str]:
    """The agent's argv, as data; hooks and confinement wrap it later (`sessions`). `forking`:
    the conversation `conversation` starts as a copy of (the profile's `fork`)."""
    if forking is not None:
        if not profile.fork or conversation is None:
            raise ValueError(f"{profile.name} cannot fork a conversation")
        parts = (
            part.replace("{id}", forking).replace("{new}", conversation) for part in profile.fork
        )
        return [*profile.command, *parts]
    if resuming and conversation and profile.resume_command:
        whole: list[str] = []
        for part in profile.resume_command:
            if part == "{command}":  # the profile's own program (a changed `command` too)
                whole += profile.command
            else:
                whole.append(part.replace("{id}", conversation))
        return whole
    argv = list(profile.command)
    if resuming and conversation and profile.resume:
        argv += [part.replace("{id}", conversation) for part in profile.resume]
    elif conversation and profile.pin:
        argv += [part.replace("{id}", conversation) for part in profile.pin]
    if prompt and not resuming and profile.prompt is Prompt.ARGV:
        argv += [part.replace("{prompt}", prompt) for part in profile.prompt_args]
    return argv


EXIT_EVENT = "exited"
"""The event the pane's wrapper writes with the agent's exit status as its detail."""
NOT_ATTENDED = ("CI", "GITHUB_ACTIONS")
"""Variables that tell a program no one is at its terminal. An agent's pane always has the
operator at it, so the wrapper drops them: a laneboard started where they are set (a CI job, a
shell that exports `CI=true`) would otherwise start Gemini CLI headless on a resume (it then
reads a prompt from stdin and quits, measured on 0.61.0)."""
WRAPPER = (
    f"unset {' '.join(NOT_ATTENDED)}; trap : TERM INT; "
    '[ -z "$LANEBOARD_EVENT_STREAM" ] || "$LANEBOARD_PYTHON" -P -m laneboard.core.adapters.'
    "eventstream </dev/null >/dev/null 2>&1 & "
    '"$@"; code=$?; '
    'printf "exited\\t-\\t%s\\n" "$code" >>"$LANEBOARD_EVENTS"; exit "$code"'
)


def pane_argv(argv: Sequence[str]) -> list[str]:
    """The pane's own command for an agent's argv: `sh` runs the agent (argv exactly, no
    quoting) and writes its exit status to the task's event file as it ends. tmux records the
    status too, but tmux 3.3 loses it now and then when a pane dies (measured: about 1 exit in
    15); the file never does. The agent stays in the pane's process group and session, so
    stopping the pane stops it. The `sh` itself outlives SIGTERM and SIGINT (a handler that
    does nothing, reset in the agent by `exec`, unlike an ignored signal): it waits for the
    agent to finish quitting, so the agent gets its whole grace to stop, and then records its
    status. A hang-up (the pane killed, the server gone) ends the `sh`, the session's leader,
    and the kernel passes it on to the agent. For an agent that reports its events as a
    server-sent stream (opencode), it also starts the stream's reader in the background. It
    drops `NOT_ATTENDED` from the agent's environment."""
    return ["sh", "-c", WRAPPER, "laneboard-agent", *argv]


# --- what an agent is doing -----------------------------------------------------------------


class AgentState(StrEnum):
    """A running task's agent sub-state (DESIGN.md section 6)."""

    STARTING = "starting"
    """Launched; nothing has shown what it does yet."""
    WORKING = "working"
    WAITING = "waiting"
    """It needs the operator: a permission, a question."""
    IDLE = "idle"
    """Its turn is done; it waits for a prompt."""
    EXITED = "exited"
    """Its process has ended (the code is in `State.code`)."""
    LOST = "lost"
    """Its pane is gone (the tmux server died, or the pane was killed)."""


HOOK_STATES: dict[str, AgentState] = {
    "UserPromptSubmit": AgentState.WORKING,
    "PreToolUse": AgentState.WORKING,
    "PostToolUse": AgentState.WORKING,
    "PermissionRequest": AgentState.WAITING,
    "Stop": AgentState.IDLE,
    "SessionStart": AgentState.IDLE,
    "SessionEnd": AgentState.EXITED,
    "agent-turn-complete": AgentState.IDLE,
    "BeforeAgent": AgentState.WORKING,
    "AfterAgent": AgentState.IDLE,
    "ToolPermission": AgentState.WAITING,
    "working": AgentState.WORKING,
    "waiting": AgentState.WAITING,
    "idle": AgentState.IDLE,
    "done": AgentState.IDLE,
}
"""Hook events (and `laneboard signal` states) and the state each means."""

DEBOUNCE = 1.5
"""A screen that matches no rule counts as idle only after it has not changed this long."""
STARTUP = 10.0
"""For this long after a (re)start, an idle input line on a moving screen is not believed: a
resumed agent draws its old conversation, idle prompt and all, while it still loads, and
drops what is typed then (Claude Code, opencode)."""
STALE_WORKING = 30.0
"""A hook's "working" is not believed once the screen has been still for this long with no rule
saying busy: some turns end without a hook."""


@value
class Observed:
    """The facts one refresh has about one task's agent."""

    alive: bool
    """Its pane's process runs."""
    exit_status: int | None = None
    pane_present: bool = True
    hook: str | None = None
    """The last hook event's name (or a `laneboard signal` state)."""
    hook_at: float | None = None
    screen: str = ""
    """The pane's last lines, escapes stripped."""
    screen_changed_at: float | None = None
    """When the screen last differed from the refresh before."""
    started_at: float | None = None


@value
class State:
    state: AgentState
    code: int | None = None
    source: str = ""
    """What said so: `tmux`, `hook`, `screen`."""

    def __str__(self) -> str:
        if self.state is AgentState.EXITED and self.code is not None:
            return f"exited({self.code})"
        return self.state.value


def recorded_state(task: Task) -> State | None:
    """The agent state the controller last recorded for a running task (`working`,
    `exited(1)`), as a `State`; None for a task not running or with nothing recorded."""
    text = task.agent_state
    if task.state is not TaskState.RUNNING or not text:
        return None
    found = re.fullmatch(r"exited\((-?\d+)\)", text)
    if found:
        return State(AgentState.EXITED, int(found.group(1)), source="recorded")
    try:
        return State(AgentState(text), source="recorded")
    except ValueError:
        return None


def _matches(patterns: Sequence[str], lines: Sequence[str]) -> bool:
    return any(re.search(p, line, re.IGNORECASE) for p in patterns for line in lines)


LIVE = 12
"""How many of the screen's last lines can hold a question that is still open."""
BUSY_LINES = 6
"""How many of the last lines can show that the agent works (its status line sits just above
its input box, its footer below)."""


FRAME = " \t\u2500\u2501\u2502\u2503\u256d\u256e\u256f\u2570\u2579\u2580"
"""Blank and box-drawing characters (─━│┃╭╮╯╰╹▀): a line of nothing else is no line of text
(the frames round Gemini's and opencode's dialogs would push a question out of view)."""


@value
class Screen:
    """What a screen shows by a profile's rules, read from its last non-blank lines."""

    waiting: bool
    """A question is open: a waiting rule matches in the live region."""
    busy: bool
    prompt: bool
    """The agent's idle input line is among the last lines."""
    blank: bool


def read_screen(profile: Profile, screen: str) -> Screen:
    """The profile's rules over a screen. A question counts only in the live region: the lines
    below the agent's last idle input line when it shows one (a question above it was answered
    and is history: `Do you want to proceed?` four lines over Claude's prompt, aider's answered
    `(Y)es/(N)o` above its `>`), else the last `LIVE` lines."""
    lines = [line for line in screen.splitlines() if line.strip(FRAME)][-40:]
    tail = lines[-LIVE:]
    live = tail
    for at in range(len(tail) - 1, -1, -1):
        if _matches(profile.idle, tail[at : at + 1]):
            live = tail[at + 1 :]
            break
    return Screen(
        waiting=_matches(profile.waiting, live),
        busy=_matches(profile.busy, lines[-BUSY_LINES:]),
        prompt=_matches(profile.idle, lines[-BUSY_LINES:]),
        blank=not lines,
    )


def ready_for_prompt(profile: Profile, screen: str) -> bool:
    """A typed prompt may go in: the agent shows its idle input line (or, for a profile with
    none, a screen) and neither a question nor work. A prompt typed into a start-up question
    answers the question instead (aider's), and one typed while it works is lost."""
    seen = read_screen(profile, screen)
    if seen.blank or seen.waiting or seen.busy:
        return False
    return seen.prompt or not profile.idle


def detect(profile: Profile, seen: Observed, now: float) -> State:
    """What the agent is doing now, and which source said so (`State.source`).

    tmux facts first (a missing pane is lost, a dead one exited). Then the last hook event,
    which is believed until the screen shows evidence against it: a "waiting" once the screen
    moved and shows no open question (answered); an "idle" while the live region shows an open
    question (aider's hook fires as its reply ends, and its `(Y)es/(N)o` follows within the
    same second, which tmux's activity time cannot tell apart), or once the screen moved and
    shows work (a turn that sent no hook); a "working" once the screen has been
    still for `STALE_WORKING` seconds with no busy rule matching (some turns end without a
    hook). A screen that merely moved (a resize or an attach redraws everything) is no
    evidence. Then the profile's screen rules (`read_screen`): an open question beats work,
    work beats an idle input line (in the first `STARTUP` seconds only once the screen is
    still); a screen that matches none is idle once still for `DEBOUNCE` seconds, and working
    (starting, in the first seconds) while it moves.
    """
    if not seen.pane_present:
        return State(AgentState.LOST, source="tmux")
    if not seen.alive:
        return State(AgentState.EXITED, seen.exit_status, source="tmux")
    screen = read_screen(profile, seen.screen)
    changed = seen.screen_changed_at
    still = changed is not None and now - changed >= DEBOUNCE
    long_still = changed is not None and now - changed >= STALE_WORKING
    moved = changed is not None and seen.hook_at is not None and changed > seen.hook_at
    hooked = HOOK_STATES.get(seen.hook or "")
    if hooked is AgentState.EXITED:
        return State(AgentState.EXITED, seen.exit_status, source="hook")
    if hooked is AgentState.WAITING and not (moved and not screen.waiting):
        return State(AgentState.WAITING, source="hook")
    if hooked is AgentState.WORKING and (screen.busy or not long_still):
        return State(AgentState.WORKING, source="hook")
    if hooked is AgentState.IDLE and not screen.waiting and not (moved and screen.busy):
        return State(AgentState.IDLE, source="hook")
    if screen.waiting:
        return State(AgentState.WAITING, source="screen")
    if screen.busy:
        return State(AgentState.WORKING, source="screen")
    if screen.blank:
        return State(AgentState.STARTING, source="screen")
    starting = seen.started_at is not None and now - seen.started_at < STARTUP
    if still or (screen.prompt and not starting):
        return State(AgentState.IDLE, source="screen")
    if starting:
        return State(AgentState.STARTING, source="screen")
    return State(AgentState.WORKING, source="screen")
