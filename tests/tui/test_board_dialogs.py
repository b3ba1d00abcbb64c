"""Every action says what will happen before you confirm it, and no dialog is a dead end
(issue 20, items 4, 6 and 8): finalize offers to pause a running agent and names the radar's
conflict, a refused discard names its fix and offers it, the new-task form starts filled in,
marks what is not installed and keeps what was typed on an error. Real git, real tmux on a
private socket, the fake Claude Code."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from textual.widgets import Input, Select, Static

from laneboard.tui.board.screens import DiscardScreen, FinalizeScreen, NewTaskScreen, Tick
from tests.conftest import git, is_ancestor
from tests.tui.pilot import agent_of, idle_and_selected, laneboard, press_button, row, select, until

pytestmark = pytest.mark.tmux


def texts(screen: object) -> str:
    return "\n".join(str(s.render()) for s in screen.query(Static))  # type: ignore[attr-defined]


def commit(worktree: Path, name: str, text: str) -> str:
    (worktree / name).write_text(text)
    git(worktree, "add", name)
    git(worktree, "commit", "-q", "-m", f"edit {name}")
    return git(worktree, "rev-parse", "HEAD")


async def test_finalize_with_the_agent_running_offers_to_pause_it_and_goes_on(
    board, repo: Path
) -> None:
    """Was: the dialog said nothing, and the merge was refused after it was confirmed (`its
    agent still runs …; pause or retain it first`)."""
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "t")
        tip = commit(repo / ".worktrees" / "t", "feature.txt", "done\n")
        assert laneboard("review", "t", "--mark", cwd=repo).returncode == 0
        await pilot.press("f")
        dialog = await until(
            pilot, lambda: isinstance(app.screen, FinalizeScreen) and app.screen, "the dialog"
        )
        assert dialog.agent_running
        assert "Its agent still runs: it is paused first" in texts(dialog)
        assert str(dialog.query_one("#merge").label) == "Pause agent and merge"
        await pilot.press("enter")
        await until(pilot, lambda: is_ancestor(repo, tip, "main"), "the tip merged into main")
        await until(pilot, lambda: row(app, "t") is None, "the finalized task off the board")
        assert not [told for told in app.told if "still runs" in told], app.told


async def test_finalize_says_when_the_radar_knows_the_merge_will_conflict(
    board, repo: Path
) -> None:
    assert laneboard("new", "t", "--no-start", cwd=repo).returncode == 0
    commit(repo / ".worktrees" / "t", "README.md", "the task's words\n")
    commit(repo, "README.md", "main's words\n")
    assert laneboard("review", "t", "--mark", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "t") and row(app, "t").cells["radar"], "the radar")
        await select(app, pilot, "t")
        await pilot.press("f")
        dialog = await until(
            pilot, lambda: isinstance(app.screen, FinalizeScreen) and app.screen, "the dialog"
        )
        assert not dialog.agent_running
        shown = texts(dialog)
        assert "merging into main conflicts in README.md" in shown
        assert "The radar says this merge will conflict" in shown


async def test_a_refused_discard_names_the_fix_and_offers_it(board, repo: Path) -> None:
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "t")
        await pilot.press("d")
        dialog = await until(
            pilot, lambda: isinstance(app.screen, DiscardScreen) and app.screen, "the dialog"
        )
        assert [b.kind.value for b in dialog.blockers] == ["agent"]  # one agent, one blocker
        await until(pilot, lambda: dialog.query("#pause"), "the offered fix")
        assert "→ `laneboard pause t` stops the agent" in texts(dialog)
        await press_button(pilot, "#pause")
        again = await until(
            pilot,
            lambda: (
                isinstance(app.screen, DiscardScreen) and app.screen is not dialog and app.screen
            ),
            "the discard asked again once the agent is paused",
        )
        # The row follows when the board's feed reads the pause (a moment later under load).
        await until(
            pilot, lambda: row(app, "t").view.task.state.value == "paused", "the row says paused"
        )
        assert not again.blockers, again.blockers  # nothing left to confirm but the discard
        await until(pilot, lambda: again.query("#discard"), "the dialog's button")
        await press_button(pilot, "#discard")
        await until(pilot, lambda: row(app, "t") is None, "the task discarded")


async def test_the_new_task_form_starts_filled_in_and_marks_what_is_not_installed(
    board, repo: Path, agents
) -> None:
    """Was: the repository field was empty though the board started in one, the default
    profile `claude` was not installed, the error named CLI flags, the form closed and what
    was typed was lost."""
    agents('default = "nothing-here"\n[agents.profiles.nothing-here]\ncommand = ["no-such-agent"]')
    async with board() as (app, pilot):
        await pilot.press("n")
        form = await until(
            pilot, lambda: isinstance(app.screen, NewTaskScreen) and app.screen, "the form"
        )
        assert form.query_one("#repo", Select).value == str(repo)
        agent = form.query_one("#agent", Select)
        assert agent.value == "claude"  # the configured default is not installed: the first one is
        labels = {str(prompt): value for prompt, value in agent._options}
        assert labels["nothing-here (not installed)"] == "nothing-here"
        assert labels["claude"] == "claude"
        form.query_one("#name", Input).value = "first"
        form.query_one("#prompt", Input).value = "the login form"
        agent.value = "nothing-here"
        await press_button(pilot, "#create")
        error = await until(pilot, lambda: form.query("#agent-error"), "the error by its field")
        assert "nothing-here is not installed" in str(error.first().render())
        assert app.screen is form  # still open, with what was typed
        assert form.query_one("#prompt", Input).value == "the login form"
        agent.value = "claude"
        # Textual ignores a click on a button still showing its last press (0.2 s)
        create = form.query_one("#create")
        await until(pilot, lambda: not create.has_class("-active"), "the button pressable again")
        await press_button(pilot, "#create")
        await until(pilot, lambda: agent_of(app, "first") == "idle", "the task's agent idle")


async def test_an_error_from_new_reopens_the_form_as_typed_with_the_error_by_its_field(
    board, repo: Path
) -> None:
    assert laneboard("new", "taken", "--no-start", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "taken"), "the task")
        await pilot.press("n")
        form = await until(
            pilot, lambda: isinstance(app.screen, NewTaskScreen) and app.screen, "the form"
        )
        form.query_one("#name", Input).value = "second"
        form.query_one("#base", Input).value = "no-such-ref"
        form.query_one("#prompt", Input).value = "keep me"
        await press_button(pilot, "#create")
        again = await until(
            pilot,
            lambda: isinstance(app.screen, NewTaskScreen) and app.screen is not form and app.screen,
            "the form again",
        )
        await until(pilot, lambda: again.query("#base-error"), "the error beside the base")
        assert again.query_one("#name", Input).value == "second"
        assert again.query_one("#prompt", Input).value == "keep me"
        assert again.query_one("#base", Input).value == "no-such-ref"


async def test_a_checkbox_reads_checked_or_not_without_colour(board) -> None:
    async with board() as (app, pilot):
        await pilot.press("slash")
        box = await until(pilot, lambda: app.screen.query(Tick), "the filter's checkbox")
        tick = box.first()
        assert "[ ]" in str(tick.render())
        tick.value = True
        await pilot.pause()
        assert "[x]" in str(tick.render())


async def test_attach_says_how_to_return_f12_comes_back_and_s_takes_me_to_the_shell(
    board, repo: Path, server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: after `a` nothing said how to get back, and `s` opened the shell's window without
    taking you there. A real client (in a pty) of the private server, as inside tmux."""
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
        end = time.monotonic() + 20
        while clients() != ["mine mine"] and time.monotonic() < end:
            time.sleep(0.05)
        socket = server.cmd("display-message", "-p", "#{socket_path}").stdout[0]
        monkeypatch.setenv("TMUX", f"{socket},1,0")
        async with board() as (app, pilot):
            await select(app, pilot, "t")
            await pilot.press("a")
            await until(pilot, lambda: clients() == ["lb-repo t"], "switched to the task")
            assert "attached to t: F12 comes back to the board" in app.told
            status = server.cmd("show-options", "-t", "lb-repo", "-v", "status-right").stdout
            assert status == [" F12: back to the board "]
            assert terminal.stdin is not None
            terminal.stdin.write(b"\x1b[24~")  # F12, as xterm sends it
            terminal.stdin.flush()
            await until(pilot, lambda: clients() == ["mine mine"], "back where the board is")
            await pilot.press("s")
            await until(pilot, lambda: clients() == ["lb-repo t-shell"], "in the shell's window")
    finally:
        terminal.kill()
        terminal.wait()


async def test_retain_of_an_agent_that_ignores_sigterm_says_what_it_waits_for(
    board, repo: Path, agents
) -> None:
    """Was: the board waited the whole grace in silence."""
    agents("stop_grace = 3", 'env = { FAKE_CLAUDE_IGNORE_TERM = "1" }')
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await idle_and_selected(app, pilot, "t")
        await pilot.press("r")
        said = str(app.status.render())
        assert "retain t: waiting for its agent to quit" in said, said
        await until(pilot, lambda: row(app, "t").view.task.state.value == "retained", "retained")
