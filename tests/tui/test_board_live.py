"""The board stays true to the world when things go wrong or move behind its back (found by
a hostile review): names that look like markup, a bad command line, the same action twice, a
locked ledger, a moved target or branch, nested build directories, a controller that quits, a
failed refresh. Real git, real tmux on a private socket, the fake Claude Code."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input

from laneboard.core.domain.models import Actor
from laneboard.core.service.app import Service
from laneboard.sessions.tmux import TmuxRuntime
from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.review import ReviewScreen
from laneboard.tui.board.screens import NewTaskScreen
from tests.conftest import REPO_ROOT, git
from tests.tui.pilot import DEADLINE, laneboard, row, select, until

pytestmark = pytest.mark.tmux


async def test_a_failed_refresh_keeps_the_last_good_board_and_says_why(
    board, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: one failed read painted an empty board ("No tasks yet") over live tasks."""
    from laneboard.core.domain.errors import LaneboardError

    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "t"), "the task")

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise LaneboardError("database is locked")

        working = app.service.snapshot
        monkeypatch.setattr(app.service, "snapshot", broken)
        assert app.feed is not None
        app.feed.wake()
        await until(pilot, lambda: "could not refresh" in str(app.status.render()), "the error")
        assert row(app, "t") is not None and app.table.display
        monkeypatch.setattr(app.service, "snapshot", working)
        app.feed.wake()
        await until(pilot, lambda: "could not refresh" not in str(app.status.render()), "healed")


async def test_names_that_look_like_markup_are_shown_as_they_are(board, repo: Path) -> None:
    """Regression: a committed file named `oops[/].txt` crashed the review screen (Textual
    parsed it as markup), and `[bold]x.txt` was listed as `x.txt`."""
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "oops[").mkdir()
    (worktree / "oops[/].txt").write_text("y\n")  # the file `].txt` in the directory `oops[`
    (worktree / "[bold]x.txt").write_text("x\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "[/] [bold]odd[/bold]")
    async with board() as (app, pilot):
        await select(app, pilot, "t")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ReviewScreen), "the review screen")
        screen = app.screen
        await until(pilot, lambda: screen.review is not None, "the review")
        files = screen.query_one("#files")
        shown = [str(files.get_option_at_index(i).prompt) for i in range(files.option_count)]
        assert any("[bold]x.txt" in line for line in shown), shown
        assert any("oops[/].txt" in line for line in shown), shown
        await pilot.press("escape")
        await pilot.press("slash")
        await until(pilot, lambda: app.screen.query("#q"), "the filter")
        app.screen.query_one("#q", Input).value = "[/]"
        await pilot.press("enter")
        await until(pilot, lambda: "[/]" in str(app.empty.render()), "no match, said plainly")
        assert app.is_running


async def test_a_command_line_with_an_open_quote_is_refused_not_a_crash(board, repo: Path) -> None:
    async with board() as (app, pilot):
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, NewTaskScreen), "the form")
        app.screen.query_one("#name", Input).value = "quoted"
        app.screen.query_one("#command", Input).value = "bash -c 'oops"
        await pilot.press("enter")
        error = await until(pilot, lambda: app.screen.query("#command-error"), "the refusal")
        assert "not a valid command line" in str(error.first().render())  # beside its field
        assert app.screen.query_one("#command", Input).value == "bash -c 'oops"  # kept
        assert app.is_running and not (repo / ".worktrees" / "quoted").exists()


async def test_the_same_action_twice_can_each_be_cancelled(board, repo: Path) -> None:
    """Regression: two `send` to one task shared one cancel token, so the first could never
    be cancelled, and after quitting it still typed into the agent."""
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        found = await select(app, pilot, "t")
        cancelled: list[bool] = []

        def waits(cancel: Any) -> None:
            cancelled.append(cancel.wait(DEADLINE))

        app._act("send", found, waits, "sent")
        app._act("send", found, waits, "sent")
        assert len(app.busy) == 2
        await pilot.press("escape")
        await pilot.press("escape")
        await until(pilot, lambda: cancelled == [True, True], "both cancelled")


async def test_a_locked_ledger_at_start_does_not_kill_the_feed(
    board, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a ledger locked for longer than SQLite's busy timeout when the board opened
    killed its feed for good ("No tasks yet" on a full board)."""
    import sqlite3
    import threading

    from laneboard.core.adapters import db
    from laneboard.tui.board import feed

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 200)
    monkeypatch.setattr(feed, "CLAIM_EVERY", 0.5)
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    ledger = Path(os.environ["LANEBOARD_HOME"]) / "ledger.sqlite3"
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        db = sqlite3.connect(ledger, isolation_level=None, check_same_thread=False)
        db.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(DEADLINE)
        db.execute("ROLLBACK")
        db.close()

    holder = threading.Thread(target=hold)
    holder.start()
    locked.wait(DEADLINE)
    try:
        service = Service(actor=Actor.TUI, runtime=TmuxRuntime(Service.tmux_socket()))
        app = BoardApp(service, here=str(repo))
        async with app.run_test(size=(160, 45)) as pilot:
            await pilot.pause(1.5)  # every read so far timed out
            release.set()
            await until(pilot, lambda: row(app, "t"), "the task, once the lock is gone")
            assert app.feed is not None
            await until(pilot, lambda: app.feed._controller, "the controller's place taken")
    finally:
        release.set()
        holder.join()


async def test_a_moved_target_or_branch_changes_the_counts_at_once(board, repo: Path) -> None:
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "t") and row(app, "t").cells["git"] == "clean", "t")
        (repo / "main.txt").write_text("on main\n")
        git(repo, "add", "main.txt")
        git(repo, "commit", "-q", "-m", "main moves")
        await until(pilot, lambda: row(app, "t").cells["git"] == "clean ↓1", "one behind")
        git(repo, "update-ref", "refs/heads/lb/t/work", "main")  # the branch moved from elsewhere
        await until(pilot, lambda: row(app, "t").cells["git"] != "clean ↓1", "re-read")


async def test_edits_under_a_nested_build_directory_name_are_seen(board, repo: Path) -> None:
    """Regression: `src/target/code.c` (tracked) was never watched: `target` was skipped at
    any depth."""
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "src" / "target").mkdir(parents=True)
    (worktree / "src" / "target" / "code.c").write_text("int x;\n")
    git(worktree, "add", "-A")
    git(worktree, "commit", "-q", "-m", "code")
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "t") and row(app, "t").cells["git"] == "clean ↑1", "t")
        (worktree / "src" / "target" / "code.c").write_text("int y;\n")
        await until(pilot, lambda: row(app, "t").cells["git"] == "M1 ↑1", "the edit")


async def test_an_observing_board_takes_over_when_the_controller_quits(board, repo: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    controller = subprocess.Popen(
        [sys.executable, "-m", "laneboard", "supervise"], cwd=repo, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        end = time.monotonic() + DEADLINE
        while Service().controller() != controller.pid:
            assert time.monotonic() < end, "supervise never became the controller"
            time.sleep(0.05)
        async with board() as (app, pilot):
            await until(pilot, lambda: "observing" in str(app.header.render()), "observing")
            controller.terminate()
            controller.wait()
            await until(pilot, lambda: app.feed._controller, "the controller's place taken")
            await until(pilot, lambda: "observing" not in str(app.header.render()), "in charge")
    finally:
        controller.kill()
        controller.wait()
