"""The board's feed reads what an event touches, not the board: a hook event re-reads its own
task, a file written re-reads its own worktree, and the backstop re-reads a fixed number of
tasks per look however many there are (and catches a write whose watch event was missed).
Real git, a real ledger; the feed runs in a thread as the board runs it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import pytest

from laneboard.core.domain.models import Actor
from laneboard.core.service.app import Service
from laneboard.tui.board import feed as feed_module
from laneboard.tui.board.feed import Feed, Update
from tests.conftest import run_cli

DEADLINE = 60.0


def git_of(updates: list[Update], name: str) -> str | None:
    for update in reversed(updates):
        for board in update.snapshot.repos:
            for view in board.tasks:
                if view.task.name == name and view.git is not None:
                    return f"{view.git.untracked}"
    return None


def wait(check: Callable[[], Any], what: str) -> Any:
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {DEADLINE}s: {what}")


class Recording(Service):
    """The real service, recording which tasks each read of rows asked for."""

    asked: list[set[str]]
    """The tasks of each read of rows with `git status`."""
    agents: list[set[str]]
    """The tasks of each read of rows without (only their agents moved)."""
    full: int
    looked: list[set[str] | None]

    def views(self, task_ids: Collection[str], **options: Any) -> Any:
        (self.asked if options.get("git", True) else self.agents).append(set(task_ids))
        return super().views(task_ids, **options)

    def snapshot(self, **kwargs: Any) -> Any:
        if kwargs.get("facts", True) and kwargs.get("git_for") is None:
            self.full += 1
        return super().snapshot(**kwargs)

    def reconcile(self, *, record: bool = False, only: Collection[str] | None = None) -> Any:
        self.looked.append(None if only is None else set(only))
        return super().reconcile(record=record, only=only)


def start_feed(**options: Any) -> tuple[Recording, list[Update], Feed, threading.Thread]:
    service = Recording(actor=Actor.TUI)
    service.asked, service.agents, service.full, service.looked = [], [], 0, []
    updates: list[Update] = []
    feed = Feed(service, updates.append, **options)
    thread = threading.Thread(target=feed.run, daemon=True)
    thread.start()
    return service, updates, feed, thread


def armed_feed(
    repo: Path, names: list[str]
) -> tuple[dict[str, str], Path, Recording, list[Update], Feed, threading.Thread]:
    """Tasks `names`, the events dir (as the first agent's launch leaves it), and a feed whose
    first full read is done and whose watch is armed."""
    ids = make_tasks(repo, names)
    events = Path(Recording.state_root()) / "events"
    events.mkdir(exist_ok=True)
    service, updates, feed, thread = start_feed()
    wait(lambda: git_of(updates, names[-1]) == "0", "the first full read")
    wait(lambda: service.asked or service.full >= 1, "the watch set up")
    time.sleep(2)  # the watch armed, its first look done
    return ids, events, service, updates, feed, thread


def make_tasks(repo: Path, names: list[str]) -> dict[str, str]:
    ids = {}
    for name in names:
        made = run_cli("new", name, "--no-start", "--json", cwd=repo)
        assert made.code == 0, made.err
        ids[name] = json.loads(made.out)["id"]
    return ids


def test_a_hook_event_reads_its_own_task_and_a_write_its_own_worktree(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "BACKSTOP_EVERY", 3600.0)  # only the events read here
    ids, events, service, updates, feed, thread = armed_feed(repo, ["a", "b", "c", "d"])
    try:
        full, asked, agents = service.full, len(service.asked), len(service.agents)
        with (events / f"{ids['b']}.log").open("a") as log:
            log.write("1\tStop\t\n")
        wait(lambda: service.agents[agents:] == [{ids["b"]}], "b's row read again")
        assert service.looked[-1] == {ids["b"]}, "the hook's task alone was looked at"
        (repo / ".worktrees" / "c" / "new.txt").write_text("x\n")
        wait(lambda: git_of(updates, "c") == "1", "c shows its untracked file")
        assert service.full == full, "an event made the feed read every task"
        assert service.asked[asked:] == [{ids["c"]}], "a write re-read more than its worktree"
        assert service.agents[agents:] == [{ids["b"]}]
    finally:
        feed.stop()
        thread.join(timeout=DEADLINE)


def test_a_write_whose_watch_event_was_missed_is_caught_by_the_backstop(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No watch at all: every event is missed. The backstop re-reads `BACKSTOP_TASKS` rows per
    look, in turn, so the write shows once it comes round to that task."""
    monkeypatch.setattr(feed_module, "BACKSTOP_EVERY", 0.2)
    make_tasks(repo, ["a", "b", "c"])
    service, updates, feed, thread = start_feed(watch=False, tick=0.2)
    try:
        wait(lambda: git_of(updates, "c") == "0", "the first full read")
        (repo / ".worktrees" / "b" / "new.txt").write_text("x\n")
        wait(lambda: git_of(updates, "b") == "1", "b shows its untracked file")
        assert service.full == 1, [u.error for u in updates if u.error]
        assert all(len(read) <= feed_module.BACKSTOP_TASKS for read in service.asked)
    finally:
        feed.stop()
        thread.join(timeout=DEADLINE)


def test_a_hook_event_that_changes_no_row_posts_nothing(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy agent's tool calls change nothing the board shows: the task is read, and nothing
    is handed to the UI (at 200 rows, painting the board again was most of an event's cost).
    A write that changes a row is posted."""
    monkeypatch.setattr(feed_module, "BACKSTOP_EVERY", 3600.0)
    ids, events, service, updates, feed, thread = armed_feed(repo, ["a", "b", "c"])
    try:
        posted, agents = len(updates), len(service.agents)
        for n in range(3):
            with (events / f"{ids['b']}.log").open("a") as log:
                log.write(f"{n}\tPreToolUse\t\n")
            wait(lambda n=n: len(service.agents) > agents + n, f"b's row read ({n + 1})")
        (repo / ".worktrees" / "c" / "new.txt").write_text("x\n")
        wait(lambda: git_of(updates, "c") == "1", "c shows its untracked file")
        after = updates[posted:]
        assert after and all(git_of([u], "c") == "1" for u in after), "a tool call was posted"
    finally:
        feed.stop()
        thread.join(timeout=DEADLINE)


def test_a_quiet_board_still_reads_its_radar_again_when_it_is_stale(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing changes, so no read is posted; the radar is still recomputed every
    `RADAR_EVERY` seconds (a target moved in a repository no watch covers)."""
    monkeypatch.setattr(feed_module, "BACKSTOP_EVERY", 0.3)
    monkeypatch.setattr(feed_module, "RADAR_EVERY", 0.5)
    computed: list[float] = []
    real = Recording.conflicts

    def counting(self: Recording, *args: Any, **kwargs: Any) -> Any:
        computed.append(time.monotonic())
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Recording, "conflicts", counting)
    make_tasks(repo, ["a", "b", "c"])
    _service, updates, feed, thread = start_feed(tick=0.2)
    try:
        wait(lambda: git_of(updates, "c") == "0", "the first full read")
        seen = wait(lambda: len(computed), "the first radar")
        wait(lambda: len(computed) >= seen + 3, "the stale radar read again, three times")
    finally:
        feed.stop()
        thread.join(timeout=DEADLINE)
