"""A host's tasks on the board (docs/hosts.md): rows named `HOST:TASK` from the host's own
laneboard over a real sshd on loopback (`tests/sshd.py`), `unreachable` while the host does not
answer and back when it does, and the board's actions sent to the host's laneboard."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from laneboard.tui.board.hosts import HostConfirmScreen
from tests.conftest import make_repo, run_cli
from tests.sshd import Remote, remote
from tests.tui.pilot import press_button, row, select, until

__all__ = ["remote"]  # the fixture
pytestmark = pytest.mark.tmux


async def test_a_hosts_tasks_are_rows_marked_with_their_host_unreachable_then_back(
    board, tmp_path: Path, remote: Remote
) -> None:
    there = make_repo(tmp_path / "host" / "repo")
    for name in ("t", "u"):
        made = run_cli(
            "new", name, "--host", "build", "--repo", str(there), "--no-start", cwd=tmp_path
        )
        assert made.code == 0, made.err
    async with board() as (app, pilot):
        found = await until(pilot, lambda: row(app, "build:t"), "the host's task on the board")
        assert (found.host, found.cells["repo"], found.cells["state"]) == (
            "build",
            "build:repo",
            "provisioned",
        )
        assert found.cells["pane"] == "build"

        await select(app, pilot, "build:u")
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, HostConfirmScreen), "the question")
        await press_button(pilot, "#yes")
        await until(pilot, lambda: row(app, "build:u") is None, "discarded on the host")
        listed = json.loads(remote.laneboard("--repo", str(there), "ls", "--json", "--all").out)
        assert {t["name"]: t["state"] for t in listed["tasks"]}["u"] == "discarded"

        remote.sshd.stop()
        gone = await until(
            pilot,
            lambda: (r := row(app, "build:t")) and r.cells["state"].startswith("unreachable") and r,
            "the host's task unreachable",
        )
        assert gone.cells["state"].startswith("unreachable (provisioned")
        await select(app, pilot, "build:t")
        await pilot.press("z")
        await until(pilot, lambda: any("unreachable" in t for t in app.told), "the refusal said")

        remote.sshd.start()
        await until(
            pilot,
            lambda: (r := row(app, "build:t")) and r.cells["state"] == "provisioned",
            "the host back",
        )


async def test_a_hosts_running_task_shows_its_screen_in_the_preview(
    board, tmp_path: Path, remote: Remote
) -> None:
    """The preview of a host's task is its pane's screen as the host's laneboard reads it,
    read again while the row stays selected."""
    remote.use_fake_agent()
    there = make_repo(tmp_path / "host" / "repo")
    made = run_cli(
        "new", "t", "--host", "build", "--repo", str(there), "--prompt", "hi", cwd=tmp_path
    )
    assert made.code == 0, made.err
    async with board() as (app, pilot):
        await until(pilot, lambda: row(app, "build:t"), "the host's task on the board")
        await select(app, pilot, "build:t")
        await until(pilot, lambda: "done: hi" in app._preview_text, "its screen in the preview")
        sent = run_cli("send", "build:t", "again", cwd=tmp_path)
        assert sent.code == 0, sent.err
        await until(pilot, lambda: "done: again" in app._preview_text, "read again")

        # The host comes back with another tmux server (as after a reboot): said once.
        remote.sshd.stop()
        await until(
            pilot, lambda: row(app, "build:t").cells["state"].startswith("unreachable"), "away"
        )
        remote.close()
        remote.sshd.start()
        await until(
            pilot, lambda: any("tmux server ended" in t for t in app.told), "the restart said"
        )
        await until(
            pilot, lambda: row(app, "build:t").cells["agent"] == "runtime lost", "its pane lost"
        )
        assert sum("tmux server ended" in t for t in app.told) == 1


async def test_the_new_task_form_makes_a_task_on_a_host(
    board, tmp_path: Path, remote: Remote
) -> None:
    """A repository typed as `HOST:/path` (or chosen from the hosts' repositories) makes the
    task there, with the host's agent profiles; the host's refusal reopens the form as typed,
    the error beside its field."""
    from textual.widgets import Input, Select

    from laneboard.tui.board.screens import NewTaskScreen

    there = make_repo(tmp_path / "host" / "repo")
    async with board() as (app, pilot):
        await pilot.press("n")
        form = await until(
            pilot, lambda: isinstance(app.screen, NewTaskScreen) and app.screen, "the form"
        )
        form.query_one("#name", Input).value = "far"
        form.query_one("#repo-path", Input).value = f"build:{tmp_path / 'host' / 'nowhere'}"
        form.query_one("#command", Input).value = "sleep 60"
        await press_button(pilot, "#create")
        error = await until(pilot, lambda: app.screen.query("#repo-error"), "the host's refusal")
        assert "build:" in str(error.first().render())
        assert app.screen.query_one("#repo-path", Input).value.startswith("build:")

        field = app.screen.query_one("#repo-path", Input)  # the form reopened, focused here
        field.value = f"build:{there}"
        await until(pilot, lambda: app.focused is field, "the field focused")
        await pilot.press("enter")
        found = await until(
            pilot,
            lambda: (r := row(app, "build:far")) and r.cells["state"] == "running" and r,
            "the task, made on the host, running",
        )
        assert found.host == "build"
        listed = json.loads(remote.laneboard("--repo", str(there), "ls", "--json").out)
        assert [(t["name"], t["state"]) for t in listed["tasks"]] == [("far", "running")]

        await pilot.press("n")  # the host's repository is offered from now on
        form = await until(
            pilot, lambda: isinstance(app.screen, NewTaskScreen) and app.screen, "the form"
        )
        options = [value for _label, value in form.query_one("#repo", Select)._options]
        assert f"build:{there}" in options
