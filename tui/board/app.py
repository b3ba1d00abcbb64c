"""The board (`laneboard` with no arguments): every task live, and the operator's actions on
the selected one from the keyboard (DESIGN.md section 10).

The app calls the service only (never git or tmux itself): reads come from the feed thread
(`feed.Feed`), each action runs in a thread worker with a `Cancel` token (esc cancels a wait for
a lane), and errors show as the one-line reasons the CLI prints. Keys, footer labels and palette
entries come from the commands declared once in `core.service.commands`; every binding has an
id the user's key map (`[board.keys]`) can remap.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Iterable
from typing import Any

from rich.cells import cell_len
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.widgets import Footer, Static

from laneboard.core.domain.agents import AgentState
from laneboard.core.domain.attention import Attention, counts
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.models import TaskState
from laneboard.core.domain.turns import seen, unseen_turns
from laneboard.core.domain.values import replace
from laneboard.core.domain.views import Outcome, RepoBoard
from laneboard.core.service.commands import COMMANDS
from laneboard.themes import DEFAULT, register
from laneboard.themes import names as theme_names
from laneboard.tui.board.alerts import Alerts
from laneboard.tui.board.feed import Feed, Update
from laneboard.tui.board.hosts import (
    ACTIONS,
    ASKED,
    SHOWN,
    HostConfirmScreen,
    HostsPoller,
    HostTextScreen,
    board_rows,
    run_on_host,
)
from laneboard.tui.board.rows import Filter, Known, Row, agent_states, arrange, rows
from laneboard.tui.board.screens import (
    CancelScreen,
    DiscardScreen,
    FilterScreen,
    Finalize,
    FinalizeScreen,
    HelpScreen,
    JournalScreen,
    NewTask,
    NewTaskScreen,
    PromptScreen,
    RadarScreen,
    event_line,
    field_of,
    host_of,
)
from laneboard.tui.board.table import TaskTable
from laneboard.tui.output import queue_summary

BOARD_COMMANDS = tuple(c for c in COMMANDS if c.key)
"""Declared commands the board binds to a key (acting on the selected task, or `new`)."""
PALETTE_ONLY = ("start", "restore", "doctor", "conflicts", "lanes")
PREVIEW_EVERY = 0.5
"""Seconds between looks at whether the selected pane printed (its screen is read only then)."""
RECENT = 3.0
"""A pane that printed this many seconds ago or less is still re-read at each look."""
REMOTE_PREVIEW_EVERY = 3.0
"""Seconds between two reads of a host's task's screen while it is selected (each is one
`show --json` over the host's connection)."""
TOLD = {
    Attention.WAITING: "is waiting for you",
    Attention.FINISHED: "finished its turn",
    Attention.REVIEW: "is ready for review",
    Attention.FAILED: "failed",
}
"""What a notice, notification or push says of a task that started needing the operator."""
AGES_EVERY = 5.0
"""Seconds between repaints of ages and lane timers when nothing else changed."""
EXTRA_BINDINGS = [
    Binding("slash", "filter", "Filter", id="board.filter"),
    Binding("N", "needs_you", "Needs you", id="board.needs_you", show=False),
    Binding("t", "theme", "Theme", id="board.theme", show=False),
    Binding("question_mark", "help", "Help", id="board.help"),
    Binding("escape", "cancel", "Cancel wait", id="board.cancel", show=False),
    Binding("q", "quit", "Quit", id="board.quit"),
]


def _bindings() -> list[Binding | tuple[str, str] | tuple[str, str, str]]:
    made = [
        Binding(
            c.key or "",
            f"command({c.name!r})",
            c.palette or c.name,
            id=c.binding,
            show=c.name in ("new", "attach", "send", "review", "discard", "finalize", "log"),
        )
        for c in BOARD_COMMANDS
    ]
    return [*made, *EXTRA_BINDINGS]


KEY = re.compile(r"^((ctrl|shift|alt|meta|super|hyper)\+)*([a-z0-9_]+|[!-~])$", re.IGNORECASE)


def checked_keymap(keys: dict[str, str], known: set[str]) -> tuple[dict[str, str], list[str]]:
    """The user's key map without the entries that would silently break a key: an unknown
    binding id, or a key that names no key (`ctrl+`, `not a key!!`); and what was left out."""
    kept: dict[str, str] = {}
    problems: list[str] = []
    for binding, value in keys.items():
        if binding not in known:
            problems.append(f"{binding!r} names no binding (`?` lists them); ignored")
            continue
        parts = [part.strip() for part in value.split(",")]
        if not parts or not all(KEY.match(part) for part in parts):
            problems.append(f"{binding} = {value!r} is not a key; the default stays")
            continue
        kept[binding] = ",".join(parts)
    return kept, problems


def show(widget: Static, text: Text) -> None:
    """Update a line of the board only when its text changed, with a layout of the screen
    only when the lines it takes may change (a layout of every widget costs more than the
    rest of an update)."""
    before: Text | None = getattr(widget, "_shown", None)
    if before == text:
        return
    widget._shown = text  # type: ignore[attr-defined]
    width = widget.content_size.width
    took = _lines(before, width) if before is not None and width > 0 else None
    widget.update(text, layout=took is None or took != _lines(text, width))


def _lines(text: Text, width: int) -> int | None:
    """The lines `text` takes in `width` cells when none wraps; None when one may."""
    lines = text.plain.split("\n")
    return len(lines) if all(cell_len(line) <= width for line in lines) else None


class BoardCommands(Provider):
    """The command palette: every declared command with a palette entry, and the board's own."""

    def _entries(self) -> list[tuple[str, Callable[[], Any], str]]:
        """(shown name, action, help). A declared command is found by its palette name and by
        its command's name too (`conflicts` finds the Conflict radar)."""
        app: BoardApp = self.app  # type: ignore[assignment]
        found: list[tuple[str, Callable[[], Any], str]] = []
        for declared in COMMANDS:
            if declared.palette:
                shown = declared.palette
                if declared.name.replace("-", " ") not in shown.lower():
                    shown = f"{shown} ({declared.name})"
                found.append((shown, _runner(app, declared.name), declared.help))
        found += [
            ("Pause all agents", lambda: app.action_command("pause-all"), "pause every agent"),
            ("Resume all agents", lambda: app.action_command("resume-all"), "resume every one"),
            ("Filter tasks", app.action_filter, "by text, repository, needs-you"),
            ("Switch theme", app.action_theme, "the next theme (remembered in config)"),
            ("Help: keys", app.action_help, "every key and its binding id"),
        ]
        return found

    async def discover(self) -> Hits:
        for name, call, help in self._entries():
            yield DiscoveryHit(name, call, help=help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, call, help in self._entries():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), call, help=help)


def _runner(app: BoardApp, name: str) -> Callable[[], None]:
    return lambda: app.action_command(name)


class BoardApp(App[None]):
    """The board. `service` is the application service (or, in snapshot tests, a stand-in
    that serves fixed values); `clock` gives "now" for ages (frozen in snapshot tests); with
    `live` False no feed runs and `initial` is shown as it is."""

    TITLE = "laneboard"
    CSS_PATH = "board.tcss"
    COMMANDS = {BoardCommands}
    BINDINGS = _bindings()
    ENABLE_COMMAND_PALETTE = True

    def __init__(
        self,
        service: Any,
        *,
        clock: Callable[[], float] = time.time,
        live: bool = True,
        initial: Update | None = None,
        here: str | None = None,
        feed: Feed | None = None,
    ) -> None:
        super().__init__()
        self.service = service
        self.clock = clock
        self.live = live
        self.here = here
        self.update_: Update | None = initial
        self.filter = Filter()
        self.rows: list[Row] = []
        self.attention: dict[str, frozenset[Attention]] = {}
        """Every kind of attention each task asked for at the last update."""
        self.agents: dict[str, Any] = {}
        """Each running task's agent state at the last update (a turn ends between two)."""
        self.unseen: frozenset[str] = frozenset()
        """Tasks whose agent finished a turn the operator has not looked at yet."""
        self.busy: dict[str, Any] = {}
        self.feed: Feed | None = feed
        """The live feed; given already started (`tui.cli`), its first reads overlap the
        board's start-up, else made on mount."""
        self.all_rows: list[Row] = []
        self._known: Known = {}
        """The rows made last time, for `_local_rows` to keep those whose inputs held."""
        self.remote_rows: list[Row] = []
        """The hosts' tasks at their last answer (`board.hosts`)."""
        self.hosts: HostsPoller | None = None
        self._hosts_seen = False
        self.config = service.board_config()
        self._preview_for: str | None = None
        self._preview_text = ""
        self._preview_activity: float | None = None
        self._remote_preview_at = 0.0
        self._title = ""
        self._failed = False
        self.suspended = False
        """The board's terminal is handed to `tmux attach` (the operator is in a pane)."""
        self.alerts = Alerts(
            desktop=self.config.desktop,
            ntfy=self.config.ntfy,
            webhook=self.config.webhook,
            push_every=self.config.push_every,
            write=self._write_terminal,
        )
        register(self)  # type: ignore[arg-type]
        self.theme = self.config.theme if self.config.theme in self.available_themes else DEFAULT

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """A notice, as plain text by default: names, paths and reasons are never markup (a
        file named `[/]` must not be able to crash the board or forge a line)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # Held as attributes: `App.query_one` looks in the active screen, which is a dialog
        # whenever one is open, and the board keeps painting under it.
        self.header, self.table = Static("", id="header", markup=False), TaskTable(id="tasks")
        self.empty, self.preview = (
            Static("", id="empty", markup=False),
            Static("", id="preview", markup=False),
        )
        self.journal, self.lanes = (
            Static("", id="journal", markup=False),
            Static("", id="lanes", markup=False),
        )
        self.status = Static("", id="status", markup=False)
        yield self.header
        with Vertical(id="main"):
            yield self.table
            yield self.empty
            with Horizontal(id="detail"):
                yield self.preview
                yield self.journal
        yield self.lanes
        yield self.status
        yield Footer()

    def on_mount(self) -> None:
        if self.config.keys:
            keymap, problems = checked_keymap(self.config.keys, self._binding_ids())
            self.set_keymap(keymap)
            for problem in problems:
                self.notify(f"[board.keys] {problem}", severity="warning", timeout=10)
        self.table.focus()
        if self.update_ is not None:
            self._apply(self.update_)
        else:
            self._paint_empty()
        if self.live:
            self.feed = self.feed or Feed(self.service)
            for update in self.feed.connect(self._post):
                self._apply(update)
            self.feed.start()
            self.set_interval(PREVIEW_EVERY, self._tick_preview)
            self.set_interval(AGES_EVERY, self._tick_ages)
            try:
                hosts = self.service.hosts()
            except LaneboardError as err:  # a bad [hosts.*] table: said, the board goes on
                self.notify(str(err), severity="error", timeout=10)
                hosts = []
            if hosts:
                self.hosts = HostsPoller(self.service, self._post_hosts)
                self.run_hosts()

    def _binding_ids(self) -> set[str]:
        from laneboard.tui.board.review import ReviewScreen

        bindings = [*self.BINDINGS, *TaskTable.BINDINGS, *ReviewScreen.BINDINGS]
        return {b.id for b in bindings if isinstance(b, Binding) and b.id}

    def _post(self, update: Update) -> None:
        """Called on the feed thread: hand the update to the UI thread."""
        if self.is_running:
            with contextlib.suppress(RuntimeError):  # the app is closing
                self.call_from_thread(self._apply, update)

    @work(thread=True, exclusive=True, group="hosts", exit_on_error=False)
    def run_hosts(self) -> None:
        assert self.hosts is not None
        self.hosts.run()

    def _post_hosts(self, answers: list[Any]) -> None:
        """Called on the hosts' thread: their tasks, to the UI thread."""
        if self.is_running:
            with contextlib.suppress(RuntimeError):
                self.call_from_thread(self._apply_hosts, answers)

    def _apply_hosts(self, answers: list[Any]) -> None:
        for answer in answers:
            if answer.restarted:
                self.notify(
                    f"host {answer.host.name}: {answer.restarted} since it was last seen: the "
                    "panes of its running tasks are gone (`resume` starts their agents again)",
                    severity="warning",
                    timeout=15,
                )
        self.remote_rows = board_rows(answers, self.clock())
        update = self.update_
        self.all_rows = [*(r for r in self.all_rows if r.host is None), *self.remote_rows]
        with self.batch_update():
            self._arrange()
            if update is not None and not update.error:
                self._paint_header(update)
        if self._hosts_seen:  # what a host's task started asking for since the last answer
            self._tell_new()
        else:  # the first answer: what was there already is not news
            self.attention.update({r.task_id: frozenset(r.needs) for r in self.remote_rows})
            self._hosts_seen = True
        self._set_title()

    def on_unmount(self) -> None:
        """However the app ends (quit, an error, a test leaving), the feed thread stops and
        every wait for a lane is cancelled: no thread outlives the board."""
        if self.feed is not None:
            self.feed.stop()
        if self.hosts is not None:
            self.hosts.stop()
        for cancel in list(self.busy.values()):
            cancel.cancel()

    # --- painting -----------------------------------------------------------------------------

    def _apply(self, update: Update) -> None:
        """Show a new update: rows, header, lanes; tell the operator what started needing them."""
        if update.error:
            # A read that failed says so and changes nothing shown: the last good state stays
            # (an empty board after one failed read would be a lie).
            self.status.update(Text(f"laneboard: could not refresh: {update.error}", "bold"))
            self._failed = True
            return
        if self._failed:
            self._failed = False
            self._paint_status()
        first = self.update_ is None or not self.attention
        self.update_ = update
        now = self.clock()
        boards = update.snapshot.repos
        states = agent_states(boards)
        self.unseen = unseen_turns(self.unseen, self.agents, states)
        self.agents = states
        self.all_rows = [*self._local_rows(update, now), *self.remote_rows]
        with self.batch_update():
            self._arrange()
            self._paint_header(update)
            self._paint_lanes(boards, now)
        if not first:
            self._tell_new()
        else:
            self.attention = {row.task_id: frozenset(row.needs) for row in self.all_rows}
        self._set_title()
        for event in update.events:
            if event.task_id is not None and event.task_id == self._preview_for:
                self.load_journal(self._selected_ref())
                break

    def _local_rows(self, update: Update, now: float) -> list[Row]:
        """This machine's rows of `update` at `now`; a row whose inputs did not change since
        the last call is not made again (`rows.rows`, `known`)."""
        return rows(update.snapshot.repos, update.radar, now, self.unseen, known=self._known)

    def _arrange(self) -> None:
        table = self.table
        self.rows = arrange(self.all_rows, self.filter)
        many = len({row.repo_id for row in self.all_rows}) > 1
        table.show(self.rows, many_repos=many)
        self._paint_empty()

    def _paint_empty(self) -> None:
        empty = self.empty
        table = self.table
        if self.rows:
            empty.display, table.display = False, True
            return
        empty.display, table.display = True, False
        if getattr(self, "all_rows", None):
            empty.update(f"No task matches the filter ({self.filter.describe()}); / changes it.")
        else:
            empty.update(
                Text.assemble(
                    ("No tasks yet.\n\n", "bold"),
                    "Press ",
                    ("n", "bold"),
                    " to create one, or run ",
                    ("laneboard new NAME", "bold"),
                    " in a repository.\nEach task gets its own branch, worktree and agent pane; ",
                    ("?", "bold"),
                    " lists every key.",
                )
            )

    def _paint_header(self, update: Update) -> None:
        tally = counts(kind for row in self.all_rows for kind in row.needs)
        repos = len(update.snapshot.repos)
        text = Text.assemble(
            ("laneboard", "bold"), f"  {len(self.all_rows)} tasks in {repos} repos"
        )
        for kind in Attention:
            if kind in tally:
                text.append("  ")
                text.append(f"{kind.marker} {tally[kind]} {kind.label}", style="bold")
        if self.filter.describe():
            text.append(f"   filter: {self.filter.describe()}", style="italic")
        controller = update.controller
        if controller:
            text.append(f"   observing (controller pid {controller})", style="dim")
        for board in update.snapshot.repos:
            if board.queue is not None:
                text.append(f"   {queue_summary(board.queue, time.time())}", style="bold")
        show(self.header, text)

    def _paint_lanes(self, boards: Iterable[RepoBoard], now: float) -> None:
        """One line per repository: its root and integration lanes, what runs in each lane
        and what waits (and for what); the machine-wide slots first."""
        snap = self.update_.snapshot if self.update_ else None
        text = Text()
        if snap is not None and snap.slots:
            text.append(f"slots {snap.used}/{snap.slots} · ", style="bold")
        for number, board in enumerate(boards):
            name = board.repo.root.rstrip("/").rsplit("/", 1)[-1]
            if number:
                text.append("\n")
            text.append(f"{name}: ", style="bold")
            if board.problem:
                text.append(board.problem, style="italic")
                continue
            parts = []
            for lane in board.lanes:
                if lane.task_id is not None and not (lane.running or lane.waiting):
                    continue
                state = "idle"
                if lane.running:
                    lease = lane.running[0]
                    cmd = shlex.join(lease.command[:2]) if lease.command else "?"
                    state = f"running {cmd} {int(now - (lease.admitted_at or now))}s"
                if lane.waiting:
                    reason = lane.waiting[0].wait_reason
                    state += f", {len(lane.waiting)} waiting"
                    state += f" ({reason})" if reason else ""
                parts.append(f"{lane.label} {state}")
            text.append(" · ".join(parts) or "idle")
        show(self.lanes, text)

    def _tell_new(self) -> None:
        """Tell the operator of every kind of attention a task asks for that it did not ask
        for at the last look (and remember what each asks for now)."""
        fresh = {row.task_id: frozenset(row.needs) for row in self.all_rows}
        for row in self.all_rows:
            before = self.attention.get(row.task_id, frozenset())
            for kind in row.needs:
                if kind not in before:
                    self._tell(row, kind)
        self.attention = fresh

    def _tell(self, row: Row, kind: Attention) -> None:
        """A notice and the bell for what notifies; when the operator is not looking at the
        board, a desktop notification for the same, and a push for what blocks."""
        if not (kind.notifies or kind.blocks):
            return
        what = TOLD[kind]
        if kind.notifies:
            self.notify(f"{row.name} {what}", title=row.repo, timeout=6)
            if self.config.bell:
                self.bell()
        if self.looking():
            return
        if kind.notifies:
            self.alerts.desktop(f"laneboard: {row.name}", f"{row.name} {what} ({row.repo})")
        self.alerts.push(kind, row.name, row.repo, f"{row.name} {what}")

    def looking(self) -> bool:
        """Whether the operator looks at the board: its terminal has the focus, it is not
        suspended under an attach, and inside tmux its pane is shown to a client."""
        return self.app_focus and not self.suspended and self.alerts.board_visible()

    def _write_terminal(self, text: str) -> None:
        driver = self._driver
        if driver is not None and not self.is_headless:
            driver.write(text)

    def _set_title(self) -> None:
        waiting = sum(1 for kinds in self.attention.values() if any(k.notifies for k in kinds))
        title = f"laneboard ({waiting})" if waiting else "laneboard"
        self.sub_title = f"{waiting} need you" if waiting else ""
        driver = self._driver
        if title != self._title and driver is not None and not self.is_headless:
            driver.write(f"\x1b]2;{title}\x07")  # the terminal's title: tmux shows it as #T
        self._title = title

    # --- the selected task: preview and journal ---------------------------------------------

    def _selected_ref(self) -> Row | None:
        return self.table.selected

    def looked_at(self, task_id: str) -> None:
        """The operator looked at the task (selected its row, attached, sent): a finished turn
        it showed is seen, and the rows, header and title say so."""
        if task_id not in self.unseen:
            return
        self.unseen = seen(self.unseen, task_id)
        if self.update_ is not None and not self.update_.error:
            update = self.update_
            self.all_rows = [*self._local_rows(update, self.clock()), *self.remote_rows]
            self.attention = {row.task_id: frozenset(row.needs) for row in self.all_rows}
            with self.batch_update():
                self._arrange()
                self._paint_header(update)
            self._set_title()

    def on_task_table_selected(self, message: TaskTable.Selected) -> None:
        row = message.row
        if row is not None:
            self.looked_at(row.task_id)
        self._preview_for = row.task_id if row else None
        self._preview_text = ""
        self._preview_activity = None
        self.preview.update("", layout=False)
        self.journal.update("", layout=False)
        if row is not None:
            self.load_preview(row)
            self.load_journal(row)

    def _tick_preview(self) -> None:
        """Read the selected pane's screen again only when the feed saw it print (a host's
        task's, every `REMOTE_PREVIEW_EVERY` seconds: one command over its connection)."""
        row = self._selected_ref()
        if row is not None and row.host is not None:
            if time.monotonic() - self._remote_preview_at >= REMOTE_PREVIEW_EVERY:
                self.load_preview(row)
            return
        pane = row.view.task.tmux_pane if row is not None else None
        if row is None or pane is None or self.feed is None:
            return
        printed = self.feed.activity.get(pane)
        # tmux counts activity in whole seconds: output later in the same second as the last
        # look leaves it unchanged, so a pane that printed lately is read once more
        lately = printed is not None and time.time() - printed < RECENT
        if printed != self._preview_activity or lately:
            self._preview_activity = printed
            self.load_preview(row)

    def _tick_ages(self) -> None:
        """Ages and lane timers move with the clock: the rows are made again from the last
        update (pure, cheap), and only rows whose text changed are repainted."""
        if self.update_ is not None and not self.update_.error:
            now = self.clock()
            self.all_rows = [*self._local_rows(self.update_, now), *self.remote_rows]
            with self.batch_update():
                self._arrange()
                self._paint_lanes(self.update_.snapshot.repos, now)

    @work(thread=True, exclusive=True, group="preview", exit_on_error=False)
    def load_preview(self, row: Row) -> None:
        lines = max(8, min(self.config.preview_lines, self.preview.size.height or 200))
        try:
            if row.host is not None:
                screen = self._remote_screen(row)
            else:
                screen = self.service.screen(row.task_id, lines=lines)
        except LaneboardError as err:
            screen = f"({err})"
        self.call_from_thread(self._show_preview, row.task_id, screen)

    def _remote_screen(self, row: Row) -> str:
        """A host's task's screen as its laneboard reads it (`show --json`: its pane's last
        lines while its agent runs, else the screen it left), over the host's connection."""
        assert row.host is not None
        self._remote_preview_at = time.monotonic()
        said = run_on_host(self.service, row.host, self._host_words(row, "show", "--json"))
        try:
            doc = json.loads(said)
        except ValueError:
            raise LaneboardError(f"{row.host}: its answer was not a task") from None
        completion = doc.get("completion") if isinstance(doc, dict) else None
        screen = completion.get("screen") if isinstance(completion, dict) else None
        return screen if isinstance(screen, str) and screen else "(no screen yet)"

    def _show_preview(self, task_id: str, screen: str) -> None:
        if task_id != self._preview_for or screen == self._preview_text:
            return
        self._preview_text = screen
        height = self.preview.size.height or 12
        tail = "\n".join(screen.rstrip("\n").splitlines()[-height:])
        shown = Text.from_ansi(tail) if tail else Text("(no pane)", style="dim")
        self.preview.update(shown, layout=False)

    @work(thread=True, exclusive=True, group="journal", exit_on_error=False)
    def load_journal(self, row: Row | None) -> None:
        if row is None:
            return
        if row.host is not None:
            try:
                said = run_on_host(self.service, row.host, self._host_words(row, "log"))
            except LaneboardError as err:
                said = str(err)
            tail = "\n".join(said.rstrip("\n").splitlines()[-10:])
            self.call_from_thread(self.journal.update, Text(tail), layout=False)
            return
        try:
            _task, events = self.service.log(row.repo_id, row.task_id)
        except LaneboardError as err:
            self.call_from_thread(self.journal.update, str(err), layout=False)
            return
        text = Text()
        for event in events[-10:]:
            text.append_text(event_line(event))
            text.append("\n")
        self.call_from_thread(self.journal.update, text, layout=False)

    # --- actions --------------------------------------------------------------------------

    def action_command(self, name: str) -> None:
        """Run the declared command `name` on the selected task (asking first where needed)."""
        row = self._selected_ref()
        if name == "new":
            self._ask_new()
            return
        if name in ("pause-all", "resume-all"):
            self._all(name.split("-")[0])
            return
        if name == "restore":
            self._ask_restore()
            return
        if name == "conflicts":
            self._show_radar()
            return
        if name in ("doctor", "lanes"):
            self.notify(f"run `laneboard {name}` for the full report", timeout=4)
            return
        if row is None:
            self.notify("no task selected", severity="warning")
            return
        if row.host is not None:
            self._on_host(name, row)
            return
        service, ref, task = self.service, (row.repo_id, row.task_id), row.view.task
        if name == "attach":
            self._attach_to(row)
        elif name == "send":
            self.push_screen(PromptScreen(task.name), lambda got: self._send(row, got))
        elif name == "shell":
            self._attach_to(row, to_shell=True)
        elif name == "pause":
            self._act("pause", row, lambda c: service.pause(*ref), "paused")
            self._say_stopping("pause", row)
        elif name == "resume":
            self._act("resume", row, lambda c: service.resume(*ref), "resumed")
        elif name == "start":
            self._act("start", row, lambda c: service.start(*ref), "agent started")
        elif name == "retain":
            self._act("retain", row, lambda c: service.retain(*ref), "retained")
            self._say_stopping("retain", row)
        elif name == "verify":
            self._act("verify", row, lambda c: service.verify(*ref)[1], "verified")
        elif name == "rebase":
            self._act("rebase", row, lambda c: service.rebase(*ref, cancel=c), "rebased")
        elif name in ("log", "show"):
            self._journal(row)
        elif name == "review":
            self._review(row)
        elif name == "discard":
            self._ask_discard(row)
        elif name == "cancel":
            self._ask_cancel(row)
        elif name == "finalize":
            self._ask_finalize(row)
        elif name == "queue":
            self._act("queue", row, lambda c: self._queue(row, c), "in the merge queue")
        elif name == "rewind":
            self._act("rewind", row, lambda c: self._rewind(row), "rewound")
        elif name == "checkpoints":
            self._act("checkpoints", row, lambda c: self._checkpoints(row), "checkpoints")

    def _host_words(self, row: Row, *verb: str) -> list[str]:
        """The host's command line for `verb` on the task of `row` (named as the host knows
        it, in its repository there)."""
        name = row.view.task.name.split(":", 1)[1]
        return ["--repo", row.view.repo.root, *verb, name]

    def _on_host(self, name: str, row: Row) -> None:
        """A board action on a host's task: its laneboard's command, run over ssh (a worker);
        its refusal shown as the same line the command line prints."""
        host = row.host
        assert host is not None
        if name in ("attach", "shell"):
            self.suspended = True
            try:
                with self.suspend():
                    words = self._host_words(row, name)
                    self.service.on_host(host, words, tty=True, out=None, err=None)
            except LaneboardError as err:
                self.notify(str(err), severity="error")
            finally:
                self.suspended = False
        elif name == "send":

            def send(got: object) -> None:
                if isinstance(got, tuple):
                    text, idle = got
                    words = [*self._host_words(row, "send"), text, *(["--when-idle"] * idle)]
                    self._act("send", row, lambda c: run_on_host(self.service, host, words), "sent")

            self.push_screen(PromptScreen(row.name), send)
        elif name in ACTIONS:
            verb, done = ACTIONS[name]
            words = self._host_words(row, *verb)

            def run(go: object = True) -> None:
                if go is True:
                    self._act(name, row, lambda c: run_on_host(self.service, host, words), done)

            if name in ASKED:
                self.push_screen(HostConfirmScreen(name, row.name, host), run)
            else:
                run()
        elif name in SHOWN:
            self._show_from_host(row, SHOWN[name])
        else:
            self.notify(f"not from the board on a host's task: `laneboard {name} {row.name}`")

    @work(thread=True, exit_on_error=False)
    def _show_from_host(self, row: Row, verb: list[str]) -> None:
        assert row.host is not None
        try:
            said = run_on_host(self.service, row.host, self._host_words(row, *verb))
        except LaneboardError as err:
            self.call_from_thread(self.notify, str(err), severity="error")
            return
        title = f"{' '.join(verb[:1])} of {row.name}"
        self.call_from_thread(self.push_screen, HostTextScreen(title, said))

    def _rewind(self, row: Row) -> Any:
        """Back to the checkpoint before the newest; the note says how to undo it."""
        before, to = self.service.rewind(row.repo_id, row.task_id)
        undo = f"`laneboard rewind {row.name} {before.n}` (or W again on checkpoint {before.n})"
        return Outcome(row.view.task, row.view.repo, notes=(f"now at checkpoint {to.n}; {undo}",))

    def _checkpoints(self, row: Row) -> Any:
        task, found = self.service.checkpoints(row.repo_id, row.task_id)
        lines = [f"{c.n}: {c.files} file(s), {c.turn}" + (" (pinned)" if c.pinned else "")
                 for c in found[-8:]]  # fmt: skip
        return Outcome(task, row.view.repo, notes=tuple(lines) or ("no checkpoint yet",))

    def _queue(self, row: Row, cancel: Any) -> Any:
        """Put the task in the merge queue and work through the line (in this worker): what
        landed and what went back to review come back as notes."""
        service = self.service
        service.queue_add(row.repo_id, [row.task_id])
        done, notes = service.queue_run(
            row.repo_id, on_wait=self._waiter(f"queue {row.name}"), cancel=cancel
        )
        said = [f"landed: {', '.join(done.landed)}"] if done.landed else []
        said += [f"{name} back to review: {why}" for name, why in done.returned]
        said += [f"{name} waits: {why}" for name, why in done.deferred]
        return Outcome(row.view.task, row.view.repo, notes=(*said, *notes))

    def _say_stopping(self, verb: str, row: Row) -> None:
        """Stopping an agent can take the whole grace (one that ignores SIGTERM is killed only
        after `agents.stop_grace`): the status line says what it waits for, not nothing."""
        if row.view.task.state is TaskState.RUNNING:
            self.status.update(
                Text(
                    f"⏳ {verb} {row.name}: waiting for its agent to quit "
                    "(SIGTERM sent; killed after agents.stop_grace if it ignores it)"
                )
            )

    def _show_radar(self) -> None:
        """The conflict radar of every repository on the board: each conflicting pair once."""
        update = self.update_
        radar = update.radar if update is not None else {}
        seen: set[tuple[str, str | None]] = set()
        lines: list[str] = []
        for overlaps in radar.values():
            for overlap in overlaps:
                if (overlap.task_id, overlap.other_id) in seen:
                    continue
                seen.add((overlap.task_id, overlap.other_id))
                files = ", ".join(overlap.check.files) or overlap.check.problem or "?"
                other = overlap.other or "its target"
                lines.append(f"{overlap.task} ⚡ {other}: {files}")
        self.push_screen(RadarScreen(sorted(lines)))

    def _ask_cancel(self, row: Row) -> None:
        service, task = self.service, row.view.task
        below = [t.name for t in service.descendants(task, include_retired=False)]
        removes = service.cancel_removes(task)

        def chosen(children: object) -> None:
            if children == "keep" or children == "cancel":

                def call(_cancel: Any) -> Any:
                    done = service.cancel(row.repo_id, row.task_id, children=children)
                    return replace(done, notes=(f"now {done.task.state.value}", *done.notes))

                self._act("cancel", row, call, "done")

        self.push_screen(CancelScreen(task, below, removes=removes), chosen)

    def _act(
        self,
        label: str,
        row: Row | None,
        call: Callable[[Any], Any],
        done: str,
        *,
        then: Callable[[], None] | None = None,
        failed: Callable[[str], None] | None = None,
    ) -> None:
        """Run `call` in a worker (esc cancels its wait for a lane); say `done` when it
        succeeded and run `then`, or hand the reason to `failed` (default: a notice)."""
        from laneboard.core.service.app import Cancel

        key = base = f"{label} {row.name}" if row else label
        again = 2
        while key in self.busy:  # the same action twice: each keeps a token of its own
            key, again = f"{base} ({again})", again + 1
        cancel = Cancel()
        self.busy[key] = cancel
        self._paint_status()
        self._run(key, call, cancel, done, row.task_id if row else None, (then, failed))

    @work(thread=True, exit_on_error=False)
    def _run(
        self,
        key: str,
        call: Callable[[Any], Any],
        cancel: Any,
        done: str,
        task_id: str | None,
        after: tuple[Callable[[], None] | None, Callable[[str], None] | None] = (None, None),
    ) -> None:
        try:
            result = call(cancel)
        except LaneboardError as err:
            lines = [str(err), *getattr(err, "details", ())]
            self.call_from_thread(self._finished, key, "\n".join(lines), True, after)
        except Exception as err:  # noqa: BLE001 (the board stays up; the reason is shown)
            text = f"{type(err).__name__}: {err}"
            self.call_from_thread(self._finished, key, text, True, after)
        else:
            notes = getattr(result, "notes", ()) or ()
            text = f"{key}: {done}" + "".join(f"\n{n}" for n in notes)
            self.call_from_thread(self._finished, key, text, False, after)
        finally:
            if self.feed is not None:
                self.feed.wake(*([task_id] if task_id else []))

    def _finished(
        self,
        key: str,
        text: str,
        failed: bool,
        after: tuple[Callable[[], None] | None, Callable[[str], None] | None] = (None, None),
    ) -> None:
        self.busy.pop(key, None)
        self._paint_status()
        then, on_failure = after
        if failed and on_failure is not None:
            on_failure(text)
            return
        self.notify(text, severity="error" if failed else "information", timeout=8)
        if not failed and then is not None:
            then()

    def _paint_status(self) -> None:
        status = self.status
        if self.busy:
            status.update(Text("⏳ " + " · ".join(self.busy) + "   (esc cancels a wait)"))
        else:
            status.update("")

    def on_waiting(self, key: str, reason: str) -> None:
        self.status.update(Text(f"⏳ {key}: waiting for {reason} (esc cancels)"))

    def _waiter(self, key: str) -> Callable[[Any], None]:
        def heard(lease: Any) -> None:
            lane = "the root lane" if lease.lane is None else f"lane {lease.lane}"
            reason = f"{lane}: {lease.wait_reason}" if lease.wait_reason else lane
            self.call_from_thread(self.on_waiting, key, reason)

        return heard

    def action_cancel(self) -> None:
        if not self.busy:
            return
        key, cancel = next(reversed(self.busy.items()))
        cancel.cancel()
        self.notify(f"cancelling {key}…", timeout=3)

    def _all(self, verb: str) -> None:
        states = (TaskState.RUNNING,) if verb == "pause" else (TaskState.PAUSED,)
        service = self.service

        def every(_cancel: Any) -> None:
            for repo_id, task in service.each(None, states):
                getattr(service, verb)(repo_id, task.id)

        self._act(f"{verb} all", None, every, "done")

    def _attach_to(self, row: Row, *, to_shell: bool = False) -> None:
        """Show the operator the task's pane (or the shell beside it): inside tmux their
        client switches to it; outside, the board suspends while `tmux attach` runs. Either
        way F12 (or detaching) comes back, and the pane's status line says so."""
        self.looked_at(row.task_id)
        show = self.service.shell_argv if to_shell else self.service.attach
        try:
            argv = show(row.repo_id, row.task_id)
        except LaneboardError as err:
            self.notify(str(err), severity="error")
            return
        what = "the shell beside" if to_shell else ""
        self.notify(f"{what or 'attached to'} {row.name}: F12 comes back to the board", timeout=6)
        if argv is None:
            return  # inside tmux: the client switched to the pane
        env = {k: v for k, v in os.environ.items() if k != "TMUX"}
        self.suspended = True
        try:
            with self.suspend():
                subprocess.run(argv, env=env, check=False)
        finally:
            self.suspended = False

    def _send(self, row: Row, got: object) -> None:
        if not isinstance(got, tuple):
            return
        text, idle = got
        self.looked_at(row.task_id)
        service = self.service
        self._act(
            "send",
            row,
            lambda c: service.send(row.repo_id, row.task_id, text, when_idle=idle, cancel=c),
            "sent",
        )

    def _ask_new(self, given: NewTask | None = None, error: tuple[str, str] | None = None) -> None:
        """The new-task form: filled in with the repository the board started in (registered
        or not) and the first installed agent profile; `given` and `error` reopen it as the
        operator left it, with the error beside its field."""
        service = self.service
        repos = [repo.root for repo in service.repos()]
        here = self.here
        if here is None and hasattr(service, "root_of"):
            here = service.root_of(os.getcwd())
        if here is not None and here not in repos:
            repos.insert(0, here)
        profiles: list[tuple[str, bool]] = []
        default = None
        if hasattr(service, "agent_choices"):
            profiles, default = service.agent_choices()
        hosts = self._host_names()
        for row in self.remote_rows:  # the repositories the hosts' tasks are in
            if (
                row.host
                and row.view is not None
                and f"{row.host}:{row.view.repo.root}" not in repos
            ):
                repos.append(f"{row.host}:{row.view.repo.root}")
        screen = NewTaskScreen(
            repos, profiles, here, default=default, given=given, error=error, hosts=hosts
        )
        self.push_screen(screen, self._create)

    def _host_names(self) -> list[str]:
        try:
            return [host.name for host in self.service.hosts()] if self.hosts else []
        except LaneboardError:
            return []

    def _create(self, got: object) -> None:
        if not isinstance(got, NewTask):
            return
        service = self.service
        from pathlib import Path

        try:
            command = shlex.split(got.command) if got.command else None
        except ValueError as err:
            self._ask_new(got, ("command", f"not a valid command line: {err}"))
            return
        remote = host_of(got.repo, self._host_names())
        if remote is not None:
            self._create_on_host(got, *remote)
            return

        def create(cancel: Any) -> Any:
            return service.new(
                Path(got.repo),
                got.name,
                base=got.base,
                target=got.target,
                start=True,
                agent=got.agent,
                command=command,
                prompt=got.prompt,
                on_wait=self._waiter(f"new {got.name}"),
                cancel=cancel,
            )

        def refused(text: str) -> None:
            text = text.replace(
                "pick another with --agent or --cmd, or create the task with --no-start",
                "choose an installed profile, or give a command line",
            )
            self._ask_new(got, (field_of(text), text))

        self._act(f"new {got.name}", None, create, "created", failed=refused)

    def _create_on_host(self, got: NewTask, host: str, root: str) -> None:
        """`new` run by the host's laneboard, in its repository `root`; its refusal reopens
        the form as it was, beside the field it is about."""
        words = ["new", got.name, "--repo", root]
        for flag, given in (
            ("--base", got.base),
            ("--target", got.target),
            ("--agent", got.agent),
            ("--cmd", got.command),
            ("--prompt", got.prompt),
        ):
            if given:
                words += [flag, given]

        def refused(text: str) -> None:
            self._ask_new(got, (field_of(text), text))

        self._act(
            f"new {host}:{got.name}",
            None,
            lambda c: run_on_host(self.service, host, words),
            "created",
            failed=refused,
        )

    def _ask_restore(self) -> None:
        row = self._selected_ref()
        from textual.widgets import Input

        from laneboard.tui.board.screens import Box, Dialog

        class RestoreScreen(Dialog):
            def compose(self) -> ComposeResult:
                with Box(classes="box"):
                    yield Static(
                        "Restore a discarded task (its name or id):", classes="title", markup=False
                    )
                    yield Input(compact=True, id="name")

            def on_input_submitted(self, event: Input.Submitted) -> None:
                self.dismiss(event.value.strip() or None)

        repo_id = row.repo_id if row else None

        def restore(name: object) -> None:
            if not isinstance(name, str):
                return
            where = repo_id if repo_id is not None else (self.here or ".")
            self._act(
                f"restore {name}",
                None,
                lambda c: self.service.restore(where, name, cancel=c),
                "restored",
            )

        self.push_screen(RestoreScreen(), restore)

    def _ask_discard(self, row: Row) -> None:
        try:
            blockers = self.service.discard_preview(row.repo_id, row.task_id)
        except LaneboardError as err:
            self.notify(str(err), severity="error")
            return

        def decided(answer: object) -> None:
            if answer == "pause":
                service = self.service
                self._act(
                    "pause",
                    row,
                    lambda c: service.pause(row.repo_id, row.task_id),
                    "paused",
                    then=lambda: self._ask_discard(row),
                )
                return
            if answer not in ("discard", "force"):
                return
            force = answer == "force"
            self._act(
                "discard",
                row,
                lambda c: self.service.discard(
                    row.repo_id,
                    row.task_id,
                    force=force,
                    on_wait=self._waiter(f"discard {row.name}"),
                    cancel=c,
                ),
                "discarded (snapshot kept; restore brings it back)",
            )

        self.push_screen(DiscardScreen(row.name, blockers), decided)

    def _ask_finalize(self, row: Row) -> None:
        """The finalize dialog, told what the board knows: whether the agent still runs (it
        offers to pause it first) and what the radar says this task's merge conflicts with."""
        view = row.view
        agent = view.agent
        running = view.task.state is TaskState.RUNNING and (
            agent is None or agent.state not in (AgentState.EXITED, AgentState.LOST)
        )
        radar = self.update_.radar.get(row.task_id, ()) if self.update_ else ()
        lines = []
        for overlap in radar:
            files = ", ".join(overlap.check.files) or overlap.check.problem or "?"
            if overlap.other_id is None:
                lines.append(f"merging into {view.task.target} conflicts in {files}")
            else:
                other = overlap.other if overlap.task_id == row.task_id else overlap.task
                lines.append(f"conflicts with {other} in {files}")
        screen = FinalizeScreen(view.task, agent_running=running, conflicts=lines)
        self.push_screen(screen, lambda got: self._finalize(row, got))

    def _finalize(self, row: Row, got: object) -> None:
        if not isinstance(got, Finalize):
            return
        service = self.service

        def paused() -> None:
            now = service.resolve(row.repo_id, row.task_id) if got.pause_first else None
            if now is not None and now.state is TaskState.RUNNING:
                service.pause(row.repo_id, row.task_id)

        if got.publish:

            def publish(_cancel: Any) -> Any:
                paused()
                return service.publish(row.repo_id, row.task_id, pr=got.pr, draft=got.draft)[0]

            self._act("publish", row, publish, "published")
            return

        def merge(cancel: Any) -> Any:
            paused()
            return service.finalize(
                row.repo_id,
                row.task_id,
                into=got.into,
                strategy=got.strategy,
                on_wait=self._waiter(f"finalize {row.name}"),
                cancel=cancel,
            )

        self._act("finalize", row, merge, "merged into its target")

    def _journal(self, row: Row) -> None:
        try:
            task, events = self.service.log(row.repo_id, row.task_id)
        except LaneboardError as err:
            self.notify(str(err), severity="error")
            return
        self.push_screen(JournalScreen(task, events))

    def _review(self, row: Row) -> None:
        from laneboard.tui.board.review import ReviewScreen

        radar = self.update_.radar.get(row.task_id, ()) if self.update_ else ()
        screen = ReviewScreen(self.service, row.repo_id, row.task_id, row.name, radar)

        def answered(what: str | None) -> None:
            if what == "mark":
                self._act(
                    "mark reviewed",
                    row,
                    lambda c: self.service.mark_reviewed(row.repo_id, row.task_id),
                    "reviewed at its tip",
                )
            elif what == "finalize":
                self._ask_finalize(row)
            elif what == "retain":
                self.action_command("retain")
            elif what == "discard":
                self._ask_discard(row)

        self.push_screen(screen, answered)

    def action_filter(self) -> None:
        repos = sorted({row.repo for row in getattr(self, "all_rows", [])})
        current = self.filter

        def apply(got: object) -> None:
            if isinstance(got, tuple):
                text, repo, needs = got
                self.filter = Filter(text, repo, needs)
                self._arrange()
                if self.update_ is not None:
                    self._paint_header(self.update_)

        self.push_screen(FilterScreen(current.text, current.repo, repos, current.needs_you), apply)

    def action_needs_you(self) -> None:
        self.filter = Filter(self.filter.text, self.filter.repo, not self.filter.needs_you)
        self._arrange()
        if self.update_ is not None:
            self._paint_header(self.update_)

    def action_theme(self) -> None:
        ours = list(theme_names())
        following = (
            ours[(ours.index(self.theme) + 1) % len(ours)] if self.theme in ours else ours[0]
        )
        self.theme = following
        try:
            self.service.save_theme(following)
        except LaneboardError as err:
            self.notify(f"theme {following} (not saved: {err})", severity="warning")
            return
        self.notify(f"theme {following}", timeout=2)

    def action_help(self) -> None:
        lines = []
        keymap = getattr(self, "_keymap", {})
        for binding in self.BINDINGS:
            if isinstance(binding, Binding) and binding.id:
                keys = keymap.get(binding.id, binding.key)
                lines.append((keys, binding.description, binding.id))
        lines.append(("ctrl+p", "Command palette", "(Textual)"))
        self.push_screen(HelpScreen(lines))
