"""The task table alone: what each line shows after the rows or the terminal change."""

from __future__ import annotations

from textual.app import App, ComposeResult

from laneboard.themes import DEFAULT, register
from laneboard.tui.board.rows import rows
from laneboard.tui.board.table import TaskTable
from tests.tui.boards import NOW, busy_update


class Alone(App[None]):
    def __init__(self) -> None:
        super().__init__()
        register(self)  # type: ignore[arg-type]
        self.theme = DEFAULT

    def compose(self) -> ComposeResult:
        yield TaskTable()


async def test_the_repo_column_appears_on_every_row_at_once() -> None:
    """Regression: when a second repository appeared, the rows drawn before kept their old
    layout under the new REPO column (a cached line ignored the columns)."""
    one_repo = rows(busy_update().snapshot.repos[:1], {}, NOW)
    app = Alone()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(TaskTable)
        table.show(one_repo, many_repos=False)
        await pilot.pause()
        assert " shop " not in table.render_line(1).text
        table.show(one_repo, many_repos=True)
        await pilot.pause()
        lines = [table.render_line(y).text for y in range(1, len(one_repo) + 1)]
        assert all(" shop " in line for line in lines), lines
        assert "REPO" in table.render_line(0).text


async def test_the_cursor_row_follows_its_task_when_rows_move() -> None:
    made = rows(busy_update().snapshot.repos, {}, NOW)
    app = Alone()
    async with app.run_test(size=(160, 20)) as pilot:
        table = app.query_one(TaskTable)
        table.show(made, many_repos=True)
        table.cursor = 3
        await pilot.pause()
        chosen = table.selected
        assert chosen is not None
        table.show(list(reversed(made)), many_repos=True)
        await pilot.pause()
        assert table.selected is not None and table.selected.task_id == chosen.task_id


async def test_a_long_list_of_blockers_still_reaches_the_confirmation() -> None:
    """Regression: with 50 blockers the discard dialog cut off the hint, the name field and
    the buttons; it scrolls now, and the field can be reached and seen."""
    from laneboard.core.domain.cleanup import Blocker, BlockerKind
    from laneboard.tui.board.screens import DiscardScreen

    blockers = tuple(
        Blocker(BlockerKind.UNTRACKED, f"untracked file: n{i}.txt", f"n{i}.txt") for i in range(50)
    )
    app = Alone()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.push_screen(DiscardScreen("beta", blockers))
        await pilot.pause()
        field = app.screen.query_one("#confirm")
        field.focus()
        await pilot.pause()
        field.scroll_visible(animate=False)
        await pilot.pause()
        assert app.screen.region.contains_region(field.region), field.region
