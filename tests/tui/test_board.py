"""The board driven with keys (Textual's Pilot) against real git repositories, real SQLite and
a real tmux server on a private socket, with the fake Claude Code as every task's agent. Other
processes (`laneboard` run as a real process) change things behind the board's back, as an
operator's scripts and hooks do."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from textual.widgets import Input

from laneboard.core.domain.attention import Attention
from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.review import ReviewScreen
from laneboard.tui.board.screens import (
    CancelScreen,
    DiscardScreen,
    FinalizeScreen,
    NewTaskScreen,
)
from tests.conftest import REPO_ROOT, git, is_ancestor
from tests.tui.pilot import DEADLINE, agent_of, idle_and_selected, laneboard, row, select, until

pytestmark = pytest.mark.tmux


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
        assert git(repo, "branch", "--list", "lb/fix-login/work")
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
        # The row may show first while the task is still being provisioned (its worktree not
        # there yet): it becomes clean once the worktree is made.
        await until(
            pilot,
            lambda: row(app, "spike") and row(app, "spike").cells["git"] == "clean",
            "the task made by the CLI, clean",
        )
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


async def test_children_sit_under_their_parent_and_cancel_asks_about_them(
    board, repo: Path
) -> None:
    assert laneboard("new", "p", "--no-start", cwd=repo).returncode == 0
    assert laneboard("new", "c", "--parent", "p", "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "c"), "the child's row")
        shown = [r.cells["name"] for r in app.table.rows]
        assert shown.index("└ c") == shown.index("p") + 1
        await select(app, pilot, "p")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CancelScreen), "the cancel dialog")
        assert "c" in app.screen.below  # type: ignore[attr-defined]
        await pilot.press("enter")  # keep the children
        await until(pilot, lambda: row(app, "p") is None, "the parent cancelled")
        assert row(app, "c") is not None
    assert not (repo / ".worktrees" / "p").exists() and (repo / ".worktrees" / "c").is_dir()


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
        await pilot.press("enter")  # a wrong name submitted forces nothing
        await pilot.pause(0.2)
        assert app.screen is dialog and not app.busy
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
