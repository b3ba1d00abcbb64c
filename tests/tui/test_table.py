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
