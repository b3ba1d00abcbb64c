"""What the board's Pilot tests share: waiting for an answer while the app runs, reading a
row, laneboard as another process, and the `board` fixture (the board open on the test's repo
and private tmux server, in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.rows import Row
from tests.conftest import REPO_ROOT

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


async def press_button(pilot: Pilot[Any], selector: str) -> None:
    """Press the button `selector` of the screen in front as an operator at the keys does:
    focused, then Enter, once it is shown and no longer shows its last press. (A click can
    miss a loaded machine's screen that is still being laid out; a key goes to the focus.)"""
    from textual.widgets import Button

    def ready() -> Button | None:
        found = pilot.app.screen.query(selector)
        button = found.first(Button) if found else None
        if button is None or not button.display or button.has_class("-active"):
            return None
        return button

    button = await until(pilot, ready, f"the button {selector}")
    button.focus()
    await until(pilot, lambda: pilot.app.focused is button, f"the button {selector} focused")
    await pilot.press("enter")


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
