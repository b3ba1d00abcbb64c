"""The board driven with keys (Textual's Pilot) against real git repositories, real SQLite and
a real tmux server on a private socket, with the fake Claude Code as every task's agent. Other
processes (`laneboard` run as a real process) change things behind the board's back, as an
operator's scripts and hooks do."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from laneboard.core.domain.attention import Attention
from laneboard.core.domain.models import Actor
from laneboard.core.service.app import Service
from laneboard.sessions.tmux import TmuxRuntime
from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.review import ReviewScreen
from laneboard.tui.board.rows import Row
from laneboard.tui.board.screens import DiscardScreen, FinalizeScreen, NewTaskScreen
from tests.conftest import REPO_ROOT, git, is_ancestor

pytestmark = pytest.mark.tmux
DEADLINE = 20.0


async def until(pilot: Pilot[Any], check: Callable[[], Any], what: str) -> Any:
    """`check()`'s first truthy answer while the app runs; fails naming `what`."""
    end = time.monotonic() + DEADLINE
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > end:
            told = [*getattr(pilot.app, "told", []), *pilot.app.busy]
            raise AssertionError(f"{what}: not within {DEADLINE}s (last {found!r}; told {told})")
        await pilot.pause(0.05)


def row(app: BoardApp, name: str) -> Row | None:
    return next((r for r in app.all_rows if r.name == name), None) if app.update_ else None


def laneboard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """laneboard as another process: what a script, a hook or a second terminal does."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "laneboard", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


@pytest.fixture
def board(repo: Path, agents, server):  # type: ignore[no-untyped-def]
    """`async with board() as (app, pilot)`: the board open on the test's repo and tmux."""

    @contextlib.asynccontextmanager
    async def opened(size: tuple[int, int] = (160, 45)) -> AsyncIterator[tuple[BoardApp, Any]]:
        service = Service(actor=Actor.TUI, runtime=TmuxRuntime(Service.tmux_socket()))
        app = BoardApp(service, here=str(repo))
        app.told = []  # type: ignore[attr-defined]
        notify = app.notify

        def heard(message: str, **kwargs: Any) -> None:
            app.told.append(message)  # type: ignore[attr-defined]
            notify(message, **kwargs)

        app.notify = heard  # type: ignore[method-assign]
        async with app.run_test(size=size) as pilot:
            await until(pilot, lambda: app.update_ is not None, "the first paint")
            yield app, pilot
            await pilot.press("q")

    return opened


def agent_of(app: BoardApp, name: str) -> str | None:
    found = row(app, name)
    return found.cells["agent"] if found else None


async def select(app: BoardApp, pilot: Pilot[Any], name: str) -> Row:
    found = await until(pilot, lambda: row(app, name), f"a row for {name}")
    app.table.select(found.task_id)
    await until(pilot, lambda: app.table.selected and app.table.selected.name == name, "cursor")
    return found


async def idle_and_selected(app: BoardApp, pilot: Pilot[Any], name: str) -> Row:
    """Wait until the task's agent is idle, then put the cursor on it."""
    await until(pilot, lambda: agent_of(app, name) == "idle", f"{name}'s agent idle")
    return await select(app, pilot, name)


async def test_an_empty_board_says_how_to_start(board) -> None:
    async with board() as (app, _pilot):
        assert app.empty.display and not app.table.display
        assert "Press n to create one" in str(app.empty.render())


async def test_new_task_from_the_board_gets_branch_worktree_and_agent(
    board, repo: Path, cli
) -> None:
    async with board() as (app, pilot):
        await pilot.press("n")
        dialog = await until(pilot, lambda: isinstance(app.screen, NewTaskScreen), "the form")
        assert dialog
        app.screen.query_one("#name", Input).value = "fix-login"
        app.screen.query_one("#prompt", Input).value = "the login form"
        await pilot.press("enter")
        await until(pilot, lambda: agent_of(app, "fix-login") == "idle", "its agent idle")
        assert git(repo, "branch", "--list", "lb/fix-login")
        assert (repo / ".worktrees" / "fix-login").is_dir()
        await select(app, pilot, "fix-login")
        # The preview is the agent's own screen, read through the service.
        await until(pilot, lambda: "done: the login form" in app._preview_text, "the preview")
    log = cli("log", "fix-login", "--json")
    assert '"actor": "tui"' in log.out


async def test_changes_by_other_processes_show_up_without_a_key(board, repo: Path) -> None:
    async with board() as (app, pilot):
        made = laneboard("new", "spike", "--no-start", cwd=repo)
        assert made.returncode == 0, made.stderr
        found = await until(pilot, lambda: row(app, "spike"), "the task made by the CLI")
        assert found.cells["git"] == "clean"
        (repo / ".worktrees" / "spike" / "notes.md").write_text("mine\n")
        await until(pilot, lambda: row(app, "spike").cells["git"] == "?1", "an untracked file")
        worktree = repo / ".worktrees" / "spike"
        git(worktree, "add", "notes.md")
        git(worktree, "commit", "-q", "-m", "notes")
        await until(pilot, lambda: row(app, "spike").cells["git"] == "clean ↑1", "one ahead")


async def test_a_hook_event_makes_the_task_wait_for_me_and_rings_the_bell(
    board, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rings: list[int] = []
    monkeypatch.setattr(BoardApp, "bell", lambda self: rings.append(1))
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        found = await until(pilot, lambda: row(app, "t"), "the task")
        await until(pilot, lambda: agent_of(app, "t") == "idle", "idle first")
        said = laneboard("signal", "--task", found.task_id, "--state", "waiting", cwd=repo)
        assert said.returncode == 0, said.stderr
        waiting = await until(
            pilot, lambda: row(app, "t").attention is Attention.WAITING, "waiting for me"
        )
        assert waiting
        assert row(app, "t").cells["mark"] == "?"  # a marker, not colour alone
        assert app.rows[0].name == "t"  # needs-you sorts first
        assert "? 1 waiting" in str(app.header.render())
        assert rings == [1]
        assert app._title == "laneboard (1)"


async def test_send_a_prompt_and_see_the_answer_in_the_preview(board, repo: Path) -> None:
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "t")
        await pilot.press("p")
        await until(pilot, lambda: app.screen.query("#text"), "the prompt dialog")
        app.screen.query_one("#text", Input).value = "add a test"
        await pilot.press("enter")
        await until(pilot, lambda: "done: add a test" in app._preview_text, "the agent's answer")


async def test_pause_then_resume_from_the_board(board, repo: Path) -> None:
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "t")
        await pilot.press("z")
        await until(pilot, lambda: row(app, "t").view.task.state.value == "paused", "paused")
        assert (repo / ".worktrees" / "t").is_dir()
        await pilot.press("Z")
        await until(pilot, lambda: agent_of(app, "t") == "idle", "resumed and idle")


async def test_review_shows_the_diff_and_marks_the_tip(board, repo: Path, cli) -> None:
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "login.py").write_text("def login():\n    return True\n")
    git(worktree, "add", "login.py")
    git(worktree, "commit", "-q", "-m", "login")
    tip = git(worktree, "rev-parse", "HEAD")
    async with board() as (app, pilot):
        await select(app, pilot, "t")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ReviewScreen), "the review screen")
        screen = app.screen
        assert isinstance(screen, ReviewScreen)
        await until(pilot, lambda: screen.review is not None and screen.hunks, "the file's diff")
        assert [f.path for f in screen.review.committed.files] == ["login.py"]
        assert screen.hunks == [5]  # the `@@` line of the one hunk
        await pilot.press("m")
        await until(pilot, lambda: row(app, "t").view.task.reviewed_sha == tip, "marked")
    assert f"reviewed: {tip}" in cli("show", "t").out or tip[:12] in cli("show", "t").out


async def test_retain_stops_the_agent_and_keeps_everything(board, repo: Path) -> None:
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "t")
        await pilot.press("r")
        await until(pilot, lambda: row(app, "t").view.task.state.value == "retained", "retained")
    assert (repo / ".worktrees" / "t").is_dir()


async def test_discard_is_refused_while_the_agent_runs_and_forced_only_by_the_typed_name(
    board, repo: Path, cli
) -> None:
    assert laneboard("new", "busy", cwd=repo).returncode == 0
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    (repo / ".worktrees" / "t" / "notes.md").write_text("mine\n")
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "busy")
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiscardScreen), "the confirmation")
        assert app.screen.hard  # the running agent: force cannot lift it
        assert not app.screen.query("#confirm")  # so nothing to type
        await pilot.press("escape")
        await select(app, pilot, "t")
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DiscardScreen), "the confirmation")
        dialog = app.screen
        assert [b.fact for b in dialog.blockers] == ["untracked file: notes.md"]
        typed = dialog.query_one("#confirm", Input)
        typed.value = "tt"
        await pilot.pause()
        assert dialog.query_one("#force").disabled
        typed.value = "t"
        await pilot.pause()
        assert not dialog.query_one("#force").disabled
        await pilot.press("enter")
        await until(pilot, lambda: row(app, "t") is None, "the task gone from the board")
    assert not (repo / ".worktrees" / "t").exists()
    assert (repo / ".worktrees" / "busy").is_dir()
    assert cli("restore", "t").code == 0  # the snapshot holds the untracked file
    assert (repo / ".worktrees" / "t" / "notes.md").read_text() == "mine\n"


async def test_finalize_merges_the_reviewed_sha_into_the_target(board, repo: Path) -> None:
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    worktree = repo / ".worktrees" / "t"
    (worktree / "feature.txt").write_text("done\n")
    git(worktree, "add", "feature.txt")
    git(worktree, "commit", "-q", "-m", "feature")
    tip = git(worktree, "rev-parse", "HEAD")
    assert laneboard("review", "t", "--mark", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await select(app, pilot, "t")
        await pilot.press("f")
        await until(pilot, lambda: isinstance(app.screen, FinalizeScreen), "the finalize dialog")
        await pilot.press("enter")  # "Merge here" has the focus
        await until(pilot, lambda: is_ancestor(repo, tip, "main"), "the tip merged into main")
        await until(pilot, lambda: row(app, "t") is None, "the finalized task off the board")


async def test_a_waiting_lane_is_shown_and_a_waiting_action_can_be_cancelled(
    board, repo: Path
) -> None:
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-m", "laneboard", "exec", "--root", "--", "sleep", "60"],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    end = time.monotonic() + DEADLINE
    while '"state": "running"' not in laneboard("lanes", "--json", cwd=repo).stdout:
        assert time.monotonic() < end, "the root lane never ran"
        time.sleep(0.05)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "laneboard", "exec", "--lane", "t", "--", "true"],
        cwd=repo,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        async with board() as (app, pilot):
            await until(
                pilot, lambda: row(app, "t").cells["lane"].startswith("waiting"), "lane waits"
            )
            assert "root running sleep 60" in str(app.lanes.render())
            await select(app, pilot, "t")
            await pilot.press("d")
            await until(pilot, lambda: isinstance(app.screen, DiscardScreen), "confirmation")
            await pilot.press("enter")  # nothing blocks; the discard waits for the root lane
            await until(pilot, lambda: "waiting for" in str(app.status.render()), "it waits")
            await pilot.press("escape")
            await until(pilot, lambda: not app.busy, "the discard cancelled")
            assert row(app, "t") is not None
    finally:
        for proc in (waiter, holder):
            proc.terminate()
            proc.wait()
    assert (repo / ".worktrees" / "t").is_dir()


async def test_attach_inside_tmux_switches_the_client_to_the_pane(
    board, repo: Path, server, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert laneboard("new", "t", cwd=repo).returncode == 0
    server.cmd("new-session", "-d", "-s", "mine", "-n", "mine", "sleep", "300")
    line = f"tmux -L {server.socket_name} attach -t mine"
    terminal = subprocess.Popen(
        ["script", "-qfc", line, "/dev/null"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TERM": "xterm"},
    )

    def clients() -> list[str]:
        return server.cmd("list-clients", "-F", "#{client_session} #{window_name}").stdout

    try:
        end = time.monotonic() + DEADLINE
        while clients() != ["mine mine"] and time.monotonic() < end:
            time.sleep(0.05)
        socket = server.cmd("display-message", "-p", "#{socket_path}").stdout[0]
        monkeypatch.setenv("TMUX", f"{socket},1,0")
        async with board() as (app, pilot):
            await select(app, pilot, "t")
            await pilot.press("a")
            await until(pilot, lambda: clients() == ["lb-repo t"], "switched to the task")
    finally:
        terminal.kill()
        terminal.wait()


async def test_keys_follow_the_users_key_map_and_the_theme_is_remembered(
    board, repo: Path, agents
) -> None:
    agents()
    config = Path(os.environ["LANEBOARD_HOME"]) / "config.toml"
    config.write_text(config.read_text() + '\n[board.keys]\n"laneboard.discard" = "x"\n')
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await select(app, pilot, "t")
        await pilot.press("d")  # remapped away
        await pilot.pause(0.2)
        assert not isinstance(app.screen, DiscardScreen)
        await pilot.press("x")
        await until(pilot, lambda: isinstance(app.screen, DiscardScreen), "discard on x")
        await pilot.press("escape")
        await pilot.press("t")
        await until(pilot, lambda: app.theme == "laneboard-light", "the next theme")
    assert config.read_text().startswith('theme = "laneboard-light"\n')
    assert '"laneboard.discard" = "x"' in config.read_text()  # the rest is kept


async def test_filter_narrows_the_board(board, repo: Path) -> None:
    for name in ("alpha", "beta"):
        assert laneboard("new", name, "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: len(app.rows) == 2, "both tasks")
        await pilot.press("slash")
        await until(pilot, lambda: app.screen.query("#q"), "the filter")
        app.screen.query_one("#q", Input).value = "bet"
        await pilot.press("enter")
        await until(pilot, lambda: [r.name for r in app.rows] == ["beta"], "only beta")
        await pilot.press("N")  # needs you: neither does
        await until(pilot, lambda: app.rows == [], "none needs me")
        assert "No task matches the filter" in str(app.empty.render())


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
        await until(
            pilot, lambda: any("not a valid command line" in t for t in app.told), "the refusal"
        )
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

    monkeypatch.setattr(db, "BUSY_TIMEOUT_MS", 200)
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
        git(repo, "update-ref", "refs/heads/lb/t", "main")  # the branch moved from elsewhere
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
