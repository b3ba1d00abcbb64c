"""The operator's attention on the live board: a finished turn is flagged until the operator
looks, and an operator who is not looking is told through the desktop (a stand-in
`notify-send` on PATH) and, for what blocks, a push (a local HTTP server as the ntfy topic
and the webhook). Real git, real tmux on a private socket, the fake Claude Code."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from laneboard.core.domain.attention import Attention
from tests.tui.pilot import agent_of, laneboard, row, select, until

pytestmark = pytest.mark.tmux


class Heard(http.server.BaseHTTPRequestHandler):
    got: list[tuple[str, dict[str, str], bytes]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.got.append((self.path, dict(self.headers), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def pushes() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    """A local HTTP server standing in for ntfy and a webhook: its URL, and what it got."""
    got: list[tuple[str, dict[str, str], bytes]] = []
    handler = type("Handler", (Heard,), {"got": got})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", got
    server.shutdown()
    server.server_close()


@pytest.fixture
def desktop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `notify-send` first on PATH; each call appends its arguments to the file
    returned. The board is not inside tmux nor over ssh, so it is the desktop's route."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "notify-send.calls"
    script = bin_dir / "notify-send"
    script.write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> {calls}\necho >> {calls}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for key in ("SSH_CONNECTION", "SSH_TTY", "SSH_CLIENT"):
        monkeypatch.delenv(key, raising=False)
    return calls


def calls_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def push_config(url: str) -> None:
    config = Path(os.environ["LANEBOARD_HOME"]) / "config.toml"
    config.write_text(
        config.read_text()
        + f'\n[board]\nbell = false\nntfy = "{url}/lb-topic"\nwebhook = "{url}/hook"\n'
    )


async def signal(app: Any, pilot: Any, repo: Path, name: str, state: str) -> None:
    """The agent says `state` through its hook file, and the board shows it."""
    said = laneboard("signal", "--task", row(app, name).task_id, "--state", state, cwd=repo)
    assert said.returncode == 0, said.stderr
    await until(pilot, lambda: agent_of(app, name) == state, f"{name} {state}")


async def test_a_finished_turn_needs_me_until_i_select_its_row(board, repo: Path) -> None:
    for name in ("a", "b"):
        assert laneboard("new", name, cwd=repo).returncode == 0
    async with board() as (app, pilot):
        for name in ("a", "b"):
            await until(pilot, lambda n=name: agent_of(app, n) == "idle", f"{name} idle")
        await select(app, pilot, "a")
        # a task first seen idle has no turn to show: nothing says it is new
        assert row(app, "b").attention is Attention.NONE
        await signal(app, pilot, repo, "b", "working")
        await signal(app, pilot, repo, "b", "idle")
        flagged = await until(
            pilot, lambda: row(app, "b").attention is Attention.FINISHED, "b's turn flagged"
        )
        assert flagged
        assert row(app, "b").cells["mark"] == ">"
        assert app.rows[0].name == "b"  # needs-you sorts first
        assert "> 1 turn done" in str(app.header.render())
        assert "b finished its turn" in app.told
        assert app._title == "laneboard (1)"
        # more looks at the board keep it flagged
        await signal(app, pilot, repo, "a", "working")
        await signal(app, pilot, repo, "a", "idle")
        assert row(app, "b").attention is Attention.FINISHED
        # a's turn ended on the row under the cursor: flagged too (the cursor resting there is
        # not a look), until the cursor moves onto it again
        await until(pilot, lambda: row(app, "a").attention is Attention.FINISHED, "a flagged")
        await select(app, pilot, "b")
        await until(pilot, lambda: row(app, "b").attention is Attention.NONE, "b seen")
        assert row(app, "b").cells["mark"].strip() == ""
        await select(app, pilot, "a")
        await until(pilot, lambda: row(app, "a").attention is Attention.NONE, "a seen")
        assert app._title == "laneboard"


async def test_sending_to_a_task_counts_as_looking_at_it(board, repo: Path) -> None:
    for name in ("a", "b"):
        assert laneboard("new", name, cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: agent_of(app, "b") == "idle", "b idle")
        await select(app, pilot, "b")
        await signal(app, pilot, repo, "b", "working")
        await signal(app, pilot, repo, "b", "idle")
        await until(pilot, lambda: row(app, "b").attention is Attention.FINISHED, "flagged")
        await pilot.press("p")
        await until(pilot, lambda: app.screen.query("#text"), "the prompt dialog")
        from textual.widgets import Input

        app.screen.query_one("#text", Input).value = "work 30"
        await pilot.press("enter")
        await until(pilot, lambda: row(app, "b").attention is not Attention.FINISHED, "seen")


async def test_away_from_the_board_i_get_a_desktop_notification_and_a_push(
    board, repo: Path, desktop: Path, pushes
) -> None:
    url, got = pushes
    push_config(url)
    assert laneboard("new", "t", cwd=repo).returncode == 0
    async with board() as (app, pilot):
        await until(pilot, lambda: agent_of(app, "t") == "idle", "idle")
        # while I look at the board nothing is sent
        await signal(app, pilot, repo, "t", "waiting")
        await signal(app, pilot, repo, "t", "idle")
        assert calls_of(desktop) == [] and got == []
        app.app_focus = False  # the terminal reported that it lost the focus
        await signal(app, pilot, repo, "t", "waiting")
        await until(pilot, lambda: calls_of(desktop), "the desktop notification")
        assert "t is waiting for you (" in calls_of(desktop)[0]
        assert "laneboard: t" in calls_of(desktop)[0]
        await until(pilot, lambda: len(got) == 2, "the ntfy push and the webhook")
        by_path = {path: (headers, body) for path, headers, body in got}
        headers, body = by_path["/lb-topic"]
        assert headers["Title"] == "laneboard: t"
        assert body.decode() == f"t is waiting for you ({repo.name})"
        hook = json.loads(by_path["/hook"][1])
        assert hook == {
            "task": "t",
            "repo": repo.name,
            "kind": "waiting",
            "message": f"t is waiting for you ({repo.name})",
        }
        # a finished turn goes to the desktop but is not pushed (it does not block)
        await signal(app, pilot, repo, "t", "working")
        await signal(app, pilot, repo, "t", "idle")
        await until(pilot, lambda: len(calls_of(desktop)) == 2, "the turn's notification")
        assert "t finished its turn" in calls_of(desktop)[1]
        # waiting again at once: told on the desktop, the push is rate-limited
        await signal(app, pilot, repo, "t", "waiting")
        await until(pilot, lambda: len(calls_of(desktop)) == 3, "the second wait's notification")
        assert len(got) == 2
