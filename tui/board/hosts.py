"""Hosts' tasks on the board (docs/hosts.md): rows for the tasks each host's laneboard reports,
marked with their host (`build:fix-login`), `unreachable` while their host does not answer, and
the board's actions on them sent to that laneboard.

The poller asks each host (one `ls --json` over its one ssh connection) every `poll` seconds of
that host (2 by default), each on a thread of its own, so a slow or silent host never holds the
board's feed, its local rows, its keys or another host's rows. A row of a remote task holds a task
value rebuilt from the host's JSON: it is for showing only; every action on it is a command of
the host's laneboard, never a local operation.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Button, Label, Static

from laneboard.core.domain.agents import AgentState, State
from laneboard.core.domain.attention import Attention, markers
from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.hosts import HostTasks, RemoteTask, refusal
from laneboard.core.domain.models import Repo, Task, TaskState
from laneboard.core.domain.values import replace
from laneboard.core.domain.views import TaskView
from laneboard.tui import remote
from laneboard.tui.board.rows import Row, ago
from laneboard.tui.board.screens import Box, Dialog
from laneboard.tui.output import CONTROLS

HOSTS_EVERY = 2.0
"""Seconds before a host whose watch failed here (its control directory) is watched again."""

ACTIONS: dict[str, tuple[list[str], str]] = {
    "pause": (["pause"], "paused"),
    "resume": (["resume"], "resumed"),
    "start": (["start"], "agent started"),
    "retain": (["retain"], "retained"),
    "verify": (["verify"], "verified"),
    "rebase": (["rebase"], "rebased"),
    "discard": (["discard"], "discarded"),
    "cancel": (["cancel"], "cancelled"),
    "finalize": (["finalize", "--merge"], "finalized"),
    "queue": (["queue", "add"], "in the merge queue"),
}
"""Board actions on a remote task, as the host's command line says them (the task's name is
put after these words). Discard never forces there: a blocker is refused there, and said here."""
ASKED = frozenset({"discard", "cancel", "finalize"})
"""Actions asked about first, as on this machine's tasks."""
SHOWN = {"review": ["review", "--patch"], "log": ["log"], "show": ["show"]}
"""Board actions that show the host's text (review with its diffs, the journal)."""


class HostsPoller:
    """Shows each host's tasks as they change there, each host on a thread of its own (a host
    that does not answer holds only its own rows, for up to its connect timeout), until
    stopped; hands every host's latest answer to `post` (called on a poller's thread). Each
    host streams its changes (`Service.watch_host`); one that cannot is asked every `poll`
    seconds of its own."""

    def __init__(self, service: Any, post: Callable[[list[HostTasks]], None]) -> None:
        self.service = service
        self.post = post
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._answers: dict[str, HostTasks] = {}

    def run(self) -> None:
        try:
            hosts = self.service.hosts()
        except LaneboardError:
            return  # a broken config: the board said so when it started
        threads = [threading.Thread(target=self._watch, args=(h,), daemon=True) for h in hosts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _watch(self, host: Any) -> None:
        """Watch one host until stopped, whatever goes wrong: a failure here shows the host's
        tasks as last seen, `unreachable` with its reason, and the watch starts again."""
        while not self._stop.is_set():
            try:
                self.service.watch_host(host, self._answer, self._stop)
            except Exception as err:  # noqa: BLE001 (a host's thread outlives any failure)
                why = (
                    str(err) if isinstance(err, LaneboardError) else f"{type(err).__name__}: {err}"
                )
                with contextlib.suppress(Exception):
                    self._answer(self.service.unreachable_answer(host, why))
                self._stop.wait(HOSTS_EVERY)

    def _answer(self, answer: HostTasks) -> None:
        name = answer.host.name
        with self._lock:  # (a restart is said once: kept without it for the next posts)
            self._answers[name] = replace(answer, restarted=None)
            answers = [answer if n == name else self._answers[n] for n in sorted(self._answers)]
        if not self._stop.is_set():
            self.post(answers)

    def stop(self) -> None:
        self._stop.set()


def run_on_host(service: Any, host: str, words: list[str]) -> str:
    """`laneboard WORDS` on `host`: its stdout, or its refusal (or the host's silence) raised
    as the one line the command line prints; control characters shown as `?` (what comes
    over the connection is the host's to choose, and the board shows it)."""
    out: list[bytes] = []
    err: list[bytes] = []
    code = service.on_host(host, words, tty=False, out=out.append, err=err.append)
    if code != 0:
        said = b"".join(err).decode(errors="replace").translate(CONTROLS)
        line, details = refusal(said)
        raise LaneboardError(f"{host}: {line}", details=details)
    return b"".join(out).decode(errors="replace").translate(CONTROLS)


def _time(text: Any) -> float:
    if not isinstance(text, str):
        return 0.0
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return 0.0


def _view(task: RemoteTask, repo_id: int) -> TaskView | None:
    """A task value for the row (showing only), from the host's JSON."""
    doc = task.document
    try:
        state = TaskState(str(doc.get("state")))
    except ValueError:
        return None
    root = str(doc.get("repo") or "")
    repo = Repo(repo_id, root, root, root.rstrip("/").rsplit("/", 1)[-1], 0.0)
    made = Task(
        id=f"{task.host}:{task.id}",
        repo_id=repo_id,
        name=task.qualified,
        state=state,
        base_ref=str(doc.get("base_ref") or ""),
        base_sha=str(doc.get("base_sha") or ""),
        branch=str(doc.get("branch") or ""),
        branch_created_by_us=bool(doc.get("branch_created_by_us")),
        branch_tip_at_creation=None,
        area="",
        worktree_path=str(doc.get("worktree_path") or ""),
        admin_name=None,
        worktree_created_by_us=bool(doc.get("worktree_created_by_us")),
        identity=None,
        created_at=_time(doc.get("created_at")),
        updated_at=_time(doc.get("updated_at")),
        target=doc.get("target"),
        reviewed_sha=doc.get("reviewed_sha"),
        parent_id=f"{task.host}:{doc['parent_id']}" if doc.get("parent_id") else None,
    )
    agent = doc.get("agent")
    state_now = None
    if isinstance(agent, dict) and task.reachable:
        try:
            state_now = State(AgentState(str(agent.get("state"))), agent.get("exit_code"))
        except (ValueError, TypeError):
            state_now = None
    return TaskView(made, repo, agent=state_now)


def _needs(view: TaskView, reachable: bool) -> tuple[Attention, ...]:
    if not reachable:
        return ()
    task, agent = view.task, view.agent
    if task.state is TaskState.FAILED:
        return (Attention.FAILED,)
    if task.state is TaskState.READY_FOR_REVIEW:
        return (Attention.REVIEW,)
    if task.state is TaskState.RUNNING and agent is not None:
        if agent.state is AgentState.WAITING:
            return (Attention.WAITING,)
        if agent.state is AgentState.EXITED and agent.code:
            return (Attention.FAILED,)
    return ()


def board_rows(answers: list[HostTasks], now: float) -> list[Row]:
    """Every host's tasks as rows of the board: named `HOST:TASK`, their repository
    `HOST:REPO`, `unreachable (last state, seen …)` while the host does not answer."""
    made: list[Row] = []
    repo_ids: dict[tuple[str, str], int] = {}
    for answer in answers:
        for task in answer.tasks:
            doc = dict(task.document)
            key = (task.host, str(doc.get("repo") or ""))
            repo_id = repo_ids.setdefault(key, -1 - len(repo_ids))
            view = _view(task, repo_id)
            if view is None:
                continue
            kinds = _needs(view, task.reachable)
            repo = f"{task.host}:{view.repo.name}"
            branch = view.task.branch.removeprefix("refs/heads/")
            target = view.task.target
            cells = {
                "mark": markers(kinds),
                "name": task.qualified,
                "repo": repo,
                "state": remote.state_text(task, answer.seen_at, now)
                if not task.reachable
                else task.last_state.replace("_", " "),
                "agent": remote.agent_text(doc) or "-",
                "pane": task.host,
                "branch": f"{branch} → {target}" if target else branch,
                "git": remote.git_text(doc) or "…",
                "lane": remote.lane_text(doc) or "-",
                "radar": "",
                "age": ago(now - view.task.updated_at) if view.task.updated_at else "",
            }
            made.append(
                Row(
                    view.task.id,
                    repo_id,
                    repo,
                    task.qualified,
                    kinds[0] if kinds else Attention.NONE,
                    cells,
                    view,
                    view.task.updated_at,
                    search=" ".join(cells.values()),
                    needs=kinds,
                    host=task.host,
                )
            )
    return made


class HostTextScreen(Dialog):
    """Text a host's laneboard printed (a review with its diffs, a journal)."""

    DEFAULT_CSS = """
    HostTextScreen > .box { width: 120; height: 90%; }
    """

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_, self.text = title, text

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label(self.title_, classes="title", markup=False)
            yield Static(Text(self.text), markup=False)
            yield Label("esc closes", classes="hint", markup=False)


class HostConfirmScreen(Dialog):
    """Asks before an action that removes or integrates a host's task; dismissed with True."""

    def __init__(self, action: str, name: str, host: str) -> None:
        super().__init__()
        self.action, self.name_, self.host = action, name, host

    def compose(self) -> ComposeResult:
        with Box(classes="box"):
            yield Label(f"{self.action.capitalize()} {self.name_}?", classes="title", markup=False)
            yield Label(
                f"Run by the laneboard of host {self.host}: it refuses there (and says why "
                "here) whatever it would refuse on its own machine.",
                markup=False,
            )
            with Horizontal():
                yield Button(self.action.capitalize(), variant="error", id="yes", compact=True)
                yield Button("Cancel", id="cancel", compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
