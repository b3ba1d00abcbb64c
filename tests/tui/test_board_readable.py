"""State you can read (issue 20, item 8) on the fixed board of the snapshot tests: the radar
found from the palette and shown, the radar column kept at 80x24, a reviewed task told apart,
a saved screen kept to one journal line."""

from __future__ import annotations

from typing import Any

from laneboard.core.domain.models import Actor, Event, TaskState
from laneboard.core.domain.values import replace
from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.rows import fit, rows, state_cell
from laneboard.tui.board.screens import RadarScreen, event_line
from tests.tui.boards import NOW, StaticSource, busy_update
from tests.tui.pilot import until


def board() -> BoardApp:
    update = busy_update()
    return BoardApp(StaticSource(update), clock=lambda: NOW, live=False, initial=update)


async def test_searching_conflicts_in_the_palette_finds_the_radar_and_shows_it() -> None:
    """Was: "conflicts" found nothing (the entry is "Conflict radar"), and the entry only said
    to run the command line."""
    app = board()
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"conflicts")
        await pilot.pause(0.5)
        await pilot.press("enter")
        screen: Any = await until(
            pilot, lambda: isinstance(app.screen, RadarScreen) and app.screen, "the radar"
        )
        assert "cart-merge ⚡ its target: cart.py" in screen.lines
        assert any(line.startswith("search-index ⚡ cart-merge") for line in screen.lines)


def test_the_radar_column_stays_at_80_columns() -> None:
    assert "radar" in [c.key for c in fit(80, many_repos=False)]
    assert "radar" in [c.key for c in fit(80)]


def test_a_reviewed_task_reads_differently_until_its_branch_moves() -> None:
    view = next(v for v in busy_update().snapshot.repos[0].tasks if v.task.name == "search-index")
    assert view.task.state is TaskState.READY_FOR_REVIEW
    assert state_cell(replace(view, task=replace(view.task, reviewed_sha=None))) == "review"
    head = view.git.head if view.git else None
    reviewed = replace(view, task=replace(view.task, reviewed_sha=head))
    assert state_cell(reviewed) == "reviewed ✓"
    moved = replace(reviewed, task=replace(view.task, reviewed_sha="9" * 40))
    assert state_cell(moved) == "review"
    update = busy_update()
    assert rows(update.snapshot.repos, update.radar, NOW)


def test_a_paused_agents_saved_screen_is_one_journal_line() -> None:
    """Was: the pause event's screen spilled every one of its lines into the journal column."""
    screen = "\n".join(f"line {n}" for n in range(30))
    event = Event(1, "t1", 1, NOW, "agent.paused", Actor.TUI, {"screen": screen, "stop": "it quit"})
    text = event_line(event).plain
    assert "\n" not in text and "screen=<30 lines>" in text and "stop=it quit" in text


def test_a_just_merged_task_is_not_shown_behind_its_target() -> None:
    """Was: a task finalized with a merge commit showed `clean ↓1` (the merge commit)."""
    from laneboard.tui.board.rows import git_cell
    from tests.tui.boards import clean

    assert git_cell(clean(0, 1), merged=True) == "clean merged"
    assert git_cell(clean(0, 1)) == "clean ↓1"
