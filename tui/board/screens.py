"""The board's dialogs: new task, send a prompt, confirm a discard, finalize, filter, journal,
help. Each is a screen that returns a plain value to the app (`dismiss`); none calls the
service itself except to read (the journal), so every change goes through the app's workers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from laneboard.core.domain.cleanup import Blocker, fixes, offered
from laneboard.core.domain.models import Event, Task


@dataclass(frozen=True)
class NewTask:
    repo: str
    name: str
    base: str | None
    target: str | None
    agent: str | None
    command: str | None
    prompt: str | None


@dataclass(frozen=True)
class Finalize:
    publish: bool
    strategy: str | None = None
    into: str | None = None
    pr: bool = False
    draft: bool = False
    pause_first: bool = False
    """Its agent still runs: pause it, then finalize."""


class Box(VerticalScroll, can_focus=False):
    """A dialog's body: it scrolls when it does not fit (a long list of blockers, a small
    terminal), and never takes the focus from the dialog's first field."""


def _given(value: str) -> str | None:
    return value.strip() or None


class Dialog(ModalScreen[object]):
    """A centered box; escape closes it with None."""

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > .box {
        width: 76; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $panel; padding: 0 1;
    }
    Dialog .title { text-style: bold; color: $primary; padding-bottom: 1; }
    Dialog .hint { color: $text-muted; }
    Dialog .blocker { color: $lb-failed; }
    Dialog .saved { color: $lb-dirty; }
    Dialog .fix { color: $text; }
    Dialog Input { margin-bottom: 1; }
    Dialog Horizontal { height: auto; margin-top: 1; }
    Dialog Button { margin-right: 2; }
    """
    BINDINGS = [Binding("escape", "close", "Cancel")]

    def action_close(self) -> None:
        self.dismiss(None)


class Tick(Checkbox):
    """A checkbox whose state reads without colour: `[x]` when checked, `[ ]` when not (the
    compact checkbox drew the same `X` either way)."""

    @property
    def _button(self) -> Content:
        return Content.assemble(
            ("[x]" if self.value else "[ ]", self.get_visual_style("toggle--button"))
        )


FIELDS = ("name", "repo", "base", "target", "agent", "command", "prompt")
"""The new-task form's fields, in order (an error is shown beside the one it names)."""


class NewTaskScreen(Dialog):
    """Name, repository, base and target, agent profile or command, first prompt. Starts
    filled in: the repository the board started in, the first installed agent profile (the
    ones not installed are marked). An error is shown beside its field and nothing typed is
    lost (`given` and `error` reopen the form as it was).

    With hosts configured (`hosts`: their names), the repositories of the hosts' tasks are in
    the list too, as `HOST:/path`, and any repository on a host can be typed as `HOST:/path`
    below it: the task is then made there, by the host's laneboard, with the agent profiles of
    that host (whether one is installed there is the host's to say)."""

    DEFAULT_CSS = """
    NewTaskScreen .error { color: $error; margin-bottom: 1; }
    """

    def __init__(
        self,
        repos: list[str],
        profiles: list[tuple[str, bool]],
        here: str | None,
        *,
        default: str | None = None,
        given: NewTask | None = None,
        error: tuple[str, str] | None = None,
        hosts: Sequence[str] = (),
    ) -> None:
        super().__init__()
        self.repos = repos
        self.hosts = tuple(hosts)
        self.profiles = profiles
        self.here = here if here in repos else (repos[0] if repos else None)
        self.default = default
        self.given = given
        self.error = error

    def _value(self, key: str) -> str:
        value = getattr(self.given, key, None) if self.given is not None else None
        return value or ""

    def _error(self, key: str) -> Iterable[Static]:
        if self.error is not None and self.error[0] == key:
            yield Static(f"↑ {self.error[1]}", classes="error", id=f"{key}-error", markup=False)

    def compose(self) -> ComposeResult:
        installed = {name for name, ok in self.profiles if ok}
        agent = self._value("agent") or self.default
        repo = self._value("repo") or self.here
        with Box(classes="box"):
            yield Label("New task", classes="title", markup=False)
            yield Input(
                self._value("name"),
                compact=True,
                placeholder="name (becomes branch lb/<name>)",
                id="name",
            )
            yield from self._error("name")
            if self.repos:
                yield Select(
                    [(Text(r), r) for r in self.repos],
                    value=repo if repo in self.repos else Select.NULL,
                    allow_blank=False,
                    id="repo",
                    compact=True,
                )
            typed = "" if self.repos and repo in self.repos else (repo or "")
            if not self.repos or self.hosts:
                yield Input(
                    typed,
                    compact=True,
                    placeholder="or a repository on a host: HOST:/path"
                    if self.repos
                    else "repository path" + (" (HOST:/path on a host)" if self.hosts else ""),
                    id="repo-path",
                )
            yield from self._error("repo")
            yield Input(
                self._value("base"),
                compact=True,
                placeholder="base (default: the target's tip)",
                id="base",
            )
            yield from self._error("base")
            yield Input(
                self._value("target"),
                compact=True,
                placeholder="target branch (default: the repo's)",
                id="target",
            )
            yield from self._error("target")
            yield Select(
                [
                    (Text(name if name in installed else f"{name} (not installed)"), name)
                    for name, _ok in self.profiles
                ],
                value=agent if agent in {n for n, _ in self.profiles} else Select.NULL,
                prompt="agent profile (none installed: give a command)",
                id="agent",
                compact=True,
            )
            yield from self._error("agent")
            yield Input(
                self._value("command"),
                compact=True,
                placeholder="or a command line to run as the agent",
                id="command",
            )
            yield from self._error("command")
            yield Input(
                self._value("prompt"), compact=True, placeholder="first prompt", id="prompt"
            )
            yield from self._error("prompt")
            yield Label("enter creates · esc cancels", classes="hint", markup=False)
            with Horizontal():
                yield Button("Create", variant="primary", id="create", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_mount(self) -> None:
        if self.error is not None:
            key = self.error[0]
            if key == "repo" and (not self.repos or self._typed_repo()):
                key = "repo-path"
            found = self.query(f"#{key}")
            if found:
                found.first().focus()

    def on_input_submitted(self) -> None:
        self._create()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "create":
            self._create()
        else:
            self.dismiss(None)

    def _typed_repo(self) -> str:
        found = self.query("#repo-path")
        return found.first(Input).value.strip() if found else ""

    def _show_error(self, key: str, message: str) -> None:
        """Put `message` beside the field `key` (replacing an earlier error), focus it."""
        for old in self.query(".error"):
            old.remove()
        if key == "repo" and (not self.repos or self._typed_repo()):
            key = "repo-path"
        field = self.query_one(f"#{key}")
        field.parent.mount(  # type: ignore[union-attr]
            Static(f"↑ {message}", classes="error", id=f"{key}-error", markup=False),
            after=field,
        )
        field.focus()

    def _create(self) -> None:
        name = self.query_one("#name", Input).value.strip()
        if not name:
            self._show_error("name", "a task needs a name")
            return
        repo = self._typed_repo()
        if not repo and self.repos:
            chosen = self.query_one("#repo", Select).value
            repo = chosen if isinstance(chosen, str) else "."
        elif not repo:
            self._show_error("repo", "which repository? give a path inside it")
            return
        on_host = host_of(repo, self.hosts) is not None
        agent = self.query_one("#agent", Select).value
        command = _given(self.query_one("#command", Input).value)
        installed = {n for n, ok in self.profiles if ok}
        if command is None and isinstance(agent, str) and agent not in installed and not on_host:
            self._show_error(
                "agent",
                f"{agent} is not installed (not on PATH): choose an installed profile, "
                "or give a command line below",
            )
            return
        if command is None and not isinstance(agent, str):
            self._show_error("agent", "no agent profile is installed: give a command line below")
            return
        self.dismiss(
            NewTask(
                repo=repo,
                name=name,
                base=_given(self.query_one("#base", Input).value),
                target=_given(self.query_one("#target", Input).value),
                agent=agent if isinstance(agent, str) and command is None else None,
                command=command,
                prompt=_given(self.query_one("#prompt", Input).value),
            )
        )


def host_of(repo: str, hosts: Sequence[str]) -> tuple[str, str] | None:
    """`(HOST, PATH)` when `repo` names a repository on a configured host (`HOST:/path`)."""
    name, colon, path = repo.partition(":")
    if colon and name in hosts and path:
        return name, path
    return None


def field_of(message: str) -> str:
    """The new-task form's field an error from `new` is about (the name, by default)."""
    lowered = message.lower()
    for key, words in (
        ("command", ("command line", "--cmd")),
        ("agent", ("profile", "not installed", "--agent")),
        ("target", ("target",)),
        ("base", ("base", "does not name a commit")),
        ("repo", ("repository", "not registered", "not a directory", "bare")),
    ):
        if any(word in lowered for word in words):
            return key
    return "name"


class PromptScreen(Dialog):
    """A prompt to type into the agent, now or once it is idle."""

    def __init__(self, task: str) -> None:
        super().__init__()
        self.task_name = task

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label(f"Send a prompt to {self.task_name}", classes="title", markup=False)
            yield Input(compact=True, placeholder="prompt", id="text")
            yield Tick("wait until the agent is idle", id="idle", compact=True)
            yield Label("enter sends · esc cancels", classes="hint", markup=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss((event.value, self.query_one("#idle", Checkbox).value))


class DiscardScreen(Dialog):
    """What blocks a discard; forcing past what a snapshot saves needs the task name typed."""

    def __init__(self, task: str, blockers: tuple[Blocker, ...]) -> None:
        super().__init__()
        self.task_name = task
        self.blockers = blockers

    @property
    def hard(self) -> list[Blocker]:
        return [b for b in self.blockers if not b.lifted_by_snapshot]

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label(f"Discard {self.task_name}?", classes="title", markup=False)
            if not self.blockers:
                yield Label(
                    "Nothing blocks it: its worktree and branch are removed after a snapshot "
                    "(`restore` brings it back).",
                    markup=False,
                )
                with Horizontal():
                    yield Button("Discard", variant="error", id="discard", compact=True)
                    yield Button("Cancel", id="cancel", compact=True)
                return
            for blocker in self.blockers:
                mark = "saved in a snapshot with force" if blocker.lifted_by_snapshot else "blocks"
                classes = "saved" if blocker.lifted_by_snapshot else "blocker"
                yield Static(f"• {blocker.fact}  ({mark})", classes=classes, markup=False)
            if self.hard:
                yield Label(
                    "Force cannot override the blockers above; deal with them first:",
                    classes="hint",
                    markup=False,
                )
                for fix in fixes(self.hard, self.task_name):
                    yield Static(f"→ {fix}", classes="fix", markup=False)
                with Horizontal():
                    if offered(self.hard) == "pause":
                        yield Button(
                            "Pause the agent, then ask again",
                            variant="warning",
                            id="pause",
                            compact=True,
                        )
                    yield Button("Close", id="cancel", compact=True)
                return
            yield Label(
                f"To save these in a snapshot and remove anyway, type {self.task_name}:",
                classes="hint",
                markup=False,
            )
            yield Input(compact=True, placeholder=self.task_name, id="confirm")
            with Horizontal():
                yield Button(
                    "Force discard", variant="error", id="force", disabled=True, compact=True
                )
                yield Button("Cancel", id="cancel", compact=True)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.query_one("#force", Button).disabled = event.value != self.task_name

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value == self.task_name:
            self.dismiss("force")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(
            {"discard": "discard", "force": "force", "pause": "pause"}.get(event.button.id or "")
        )


class FinalizeScreen(Dialog):
    """Merge the reviewed SHA into the target here, or publish it (optionally with a PR).
    Enter merges with the defaults; tab reaches the choices. Before you confirm it says what
    will happen: an agent that still runs is paused first (finalize refuses a running agent),
    and the radar's conflicts of this task are named."""

    AUTO_FOCUS = "#merge"

    def __init__(
        self, task: Task, *, agent_running: bool = False, conflicts: Sequence[str] = ()
    ) -> None:
        super().__init__()
        self.task_ = task
        self.agent_running = agent_running
        self.conflicts = tuple(conflicts)

    def compose(self) -> ComposeResult:
        task = self.task_
        reviewed = task.reviewed_sha[:12] if task.reviewed_sha else "not reviewed yet"
        with Box(classes="box"):
            yield Label(f"Finalize {task.name}", classes="title", markup=False)
            yield Label(f"reviewed: {reviewed} · target: {task.target or '?'}", markup=False)
            if self.agent_running:
                yield Static(
                    "Its agent still runs: it is paused first (its conversation is kept; "
                    "Z resumes it), then the merge goes on.",
                    classes="saved",
                    markup=False,
                )
            for line in self.conflicts:
                yield Static(f"⚡ {line}", classes="blocker", markup=False)
            if self.conflicts:
                yield Static(
                    "The radar says this merge will conflict: finalize stops at the conflict "
                    "and changes nothing (b rebases the task onto its target to resolve it).",
                    classes="hint",
                    markup=False,
                )
            yield Select(
                [("merge commit", "merge"), ("squash", "squash"), ("rebase", "rebase")],
                prompt="strategy (default: finalize.strategy)",
                id="strategy",
                compact=True,
            )
            yield Input(compact=True, placeholder=f"into (default: {task.target})", id="into")
            yield Tick("open a pull request (publish)", id="pr", compact=True)
            yield Tick("as a draft", id="draft", compact=True)
            with Horizontal():
                merge = "Pause agent and merge" if self.agent_running else "Merge here"
                yield Button(merge, variant="primary", id="merge", compact=True)
                yield Button("Publish", id="publish", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "cancel":
            self.dismiss(None)
            return
        strategy = self.query_one("#strategy", Select).value
        self.dismiss(
            Finalize(
                publish=event.button.id == "publish",
                strategy=strategy if isinstance(strategy, str) else None,
                into=_given(self.query_one("#into", Input).value),
                pr=self.query_one("#pr", Checkbox).value,
                draft=self.query_one("#draft", Checkbox).value,
                pause_first=self.agent_running,
            )
        )


class CancelScreen(Dialog):
    """Cancel a task: before its agent started, what it created is removed; after, its agent
    stops and everything is kept. A task with live children asks what becomes of them (enter:
    keep them)."""

    AUTO_FOCUS = "#keep"

    def __init__(self, task: Task, children: list[str], *, removes: bool) -> None:
        super().__init__()
        self.task_ = task
        self.below = children
        self.removes = removes  # no agent was ever handed it: the cancel removes its creations

    def compose(self) -> ComposeResult:
        task = self.task_
        with Box(classes="box"):
            yield Label(f"Cancel {task.name} ({task.state.value})", classes="title", markup=False)
            yield Label(
                "No agent has started: its worktree and branch are removed\n"
                "(anything written there is saved in a snapshot first)."
                if self.removes
                else "Its agent stops; worktree and branch are kept (retained).",
                markup=False,
            )
            if self.below:
                yield Label(f"Its live children: {', '.join(self.below)}", markup=False)
            with Horizontal():
                keep = "Cancel, keep children" if self.below else "Cancel task"
                yield Button(keep, variant="error", id="keep", compact=True)
                if self.below:
                    yield Button("Cancel children too", id="cancel", compact=True)
                yield Button("Back", id="back", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"keep": "keep", "cancel": "cancel"}.get(event.button.id or ""))


class FilterScreen(Dialog):
    """Narrow the board by text, repository and needs-you."""

    def __init__(self, text: str, repo: str | None, repos: list[str], needs: bool) -> None:
        super().__init__()
        self.text, self.repo, self.repos, self.needs = text, repo, repos, needs

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label("Filter", classes="title", markup=False)
            yield Input(
                compact=True,
                value=self.text,
                placeholder="words that must appear in the row",
                id="q",
            )
            yield Select(
                [(Text(r), r) for r in self.repos],
                value=self.repo if self.repo in self.repos else Select.NULL,
                prompt="every repository",
                id="repo",
                compact=True,
            )
            yield Tick("only tasks that need me", self.needs, id="needs", compact=True)
            yield Label("enter applies · esc cancels", classes="hint", markup=False)

    def on_input_submitted(self) -> None:
        repo = self.query_one("#repo", Select).value
        self.dismiss(
            (
                self.query_one("#q", Input).value,
                repo if isinstance(repo, str) else None,
                self.query_one("#needs", Checkbox).value,
            )
        )


def _short(value: object) -> str:
    """A commit id as its first 10 digits, a path as its last two parts, a text of several
    lines (a saved screen) as its line count: an event is one line."""
    text = str(value)
    if "\n" in text:
        return f"<{len(text.splitlines())} lines>"
    if len(text) == 40 and all(c in "0123456789abcdef" for c in text):
        return text[:10]
    if text.startswith("/") and text.count("/") > 2:
        return "…/" + "/".join(text.rsplit("/", 2)[-2:])
    return text


def event_line(event: Event) -> Text:
    when = time.strftime("%H:%M:%S", time.localtime(event.at))
    data = " ".join(
        f"{k}={_short(v)}" for k, v in event.data.items() if not isinstance(v, dict | list)
    )
    line = Text(f"{when} ", style="dim")
    line.append(event.kind, style="bold")
    line.append(f" ({event.actor.value}) ")
    line.append(data[:160])
    return line


OWNERSHIP = (
    "id",
    "state",
    "branch",
    "branch_created_by_us",
    "base_sha",
    "worktree_path",
    "worktree_created_by_us",
    "admin_name",
    "target",
    "reviewed_sha",
    "finalized_sha",
    "tmux_pane",
    "conversation_id",
)


class JournalScreen(Dialog):
    """The task's ownership record and its whole journal."""

    DEFAULT_CSS = """
    JournalScreen > .box { width: 120; height: 90%; }
    JournalScreen VerticalScroll { height: 1fr; }
    """

    def __init__(self, task: Task, events: list[Event]) -> None:
        super().__init__()
        self.task_, self.events = task, events

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label(f"Journal of {self.task_.name}", classes="title", markup=False)
            record = Text()
            for key in OWNERSHIP:
                record.append(f"{key:>24} ", style="dim")
                record.append(f"{getattr(self.task_, key)}\n")
            with VerticalScroll():
                yield Static(record, markup=False)
                journal = Text()
                for event in self.events:
                    journal.append_text(event_line(event))
                    journal.append("\n")
                yield Static(journal, markup=False)
            yield Label("esc closes", classes="hint", markup=False)


class RadarScreen(Dialog):
    """The conflict radar: which tasks' own work conflicts with their target or each other."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label("Conflict radar", classes="title", markup=False)
            if not self.lines:
                yield Static(
                    "No conflicts: every task's own work merges with its target and with the "
                    "other tasks'.",
                    markup=False,
                )
            for line in self.lines:
                yield Static(line, classes="blocker", markup=False)
            yield Label(
                "R on a task reviews it with its radar · b rebases it · esc closes",
                classes="hint",
                markup=False,
            )


class HelpScreen(Dialog):
    """Every key of the board, with its binding id for the key map."""

    DEFAULT_CSS = "HelpScreen > .box { width: 100; height: 90%; }"

    def __init__(self, lines: list[tuple[str, str, str]]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        text = Text()
        for keys, what, binding in self.lines:
            text.append(f"{keys:>12}  ", style="bold")
            text.append(f"{what:<32}")
            text.append(f"{binding}\n", style="dim")
        with Box(classes="box"):
            yield Label(
                "Keys (remap in config.toml: [board.keys] binding = 'key')",
                classes="title",
                markup=False,
            )
            with VerticalScroll():
                yield Static(text, markup=False)
            yield Label(
                "esc closes · ctrl+p opens the command palette", classes="hint", markup=False
            )
