"""Snapshots of the board (SVG, checked in under `__snapshots__`): fixed terminal sizes, a
frozen clock and fixed ids and paths (`tests/tui/boards.py`). Update them after an intended
change with `pytest tests/tui/test_snapshots.py --snapshot-update`, and look at each SVG."""

from __future__ import annotations

import time
from typing import Any

import pytest

from laneboard.themes import names
from laneboard.tui.board.app import BoardApp
from tests.tui.boards import NOW, StaticSource, busy_update, empty_update


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> None:
    """Journal times are local times: pin the zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()


def board(update: Any = None, theme: str | None = None) -> BoardApp:
    update = update or busy_update()
    return BoardApp(StaticSource(update, theme), clock=lambda: NOW, live=False, initial=update)


async def settled(pilot: Any) -> None:
    """Every worker (preview, journal, review) has answered and the screen is painted."""
    for _ in range(3):
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()


def pressing(*keys: str) -> Any:
    """Settle, press `keys`, settle again: a dialog's own workers (the discard's blockers, the
    form's profiles) answer before the picture is taken, however loaded the machine is."""

    async def run(pilot: Any) -> None:
        from textual.widgets import Input

        await settled(pilot)
        await pilot.press(*keys)
        await settled(pilot)
        for field in pilot.app.screen.query(Input):  # a blink can fall on either side of the
            field.cursor_blink = False  # picture on a loaded machine: hold the cursor still
        await settled(pilot)

    return run


def test_the_empty_board(snap_compare) -> None:
    assert snap_compare(board(empty_update()), terminal_size=(100, 30), run_before=settled)


def test_a_busy_board_with_every_state(snap_compare) -> None:
    assert snap_compare(board(), terminal_size=(160, 45), run_before=settled)


def test_narrow_terminal(snap_compare) -> None:
    assert snap_compare(board(), terminal_size=(80, 24), run_before=settled)


def test_wide_terminal(snap_compare) -> None:
    assert snap_compare(board(), terminal_size=(200, 50), run_before=settled)


@pytest.mark.parametrize("theme", names())
def test_each_theme(snap_compare, theme: str) -> None:
    assert snap_compare(board(theme=theme), terminal_size=(120, 32), run_before=settled)


def test_the_new_task_form(snap_compare) -> None:
    assert snap_compare(board(), terminal_size=(120, 40), run_before=pressing("n"))


def test_the_discard_confirmation_lists_the_blockers(snap_compare) -> None:
    assert snap_compare(board(), terminal_size=(120, 36), run_before=pressing("d"))


def test_the_review_screen(snap_compare) -> None:
    async def reviewed(pilot: Any) -> None:
        await pilot.press("j", "j")  # search-index, ready for review
        await pilot.press("R")
        await settled(pilot)

    assert snap_compare(board(), terminal_size=(140, 40), run_before=reviewed)
