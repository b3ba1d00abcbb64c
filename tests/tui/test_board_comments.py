"""A comment made on the review screen reaches the service's `comment` (the call `laneboard
review --comment` makes), anchored to the highlighted file and the line typed."""

from __future__ import annotations

from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.review import CommentScreen, ReviewScreen
from tests.tui.boards import NOW, StaticSource, busy_update
from tests.tui.pilot import until


async def test_c_on_the_review_screen_comments_on_the_highlighted_file() -> None:
    update = busy_update()
    source = StaticSource(update, None)
    app = BoardApp(source, clock=lambda: NOW, live=False, initial=update)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        for _ in range(len(app.rows)):
            selected = app._selected_ref()
            if selected is not None and selected.name == "search-index":
                break
            await pilot.press("j")
        await pilot.press("R")
        await until(pilot, lambda: isinstance(app.screen, ReviewScreen), "the review screen")
        await until(pilot, lambda: app.screen.review is not None, "the review read")  # type: ignore[attr-defined]
        await pilot.press("c")
        dialog = await until(
            pilot, lambda: isinstance(app.screen, CommentScreen) and app.screen, "the dialog"
        )
        assert dialog.at == "search/index.py:"
        await pilot.press("2", "enter")
        for key in "use NFKC here":
            await pilot.press("space" if key == " " else key)
        await pilot.press("enter")
        await until(pilot, lambda: source.commented, "the comment made")
        assert source.commented == [("000000000003", "search/index.py:2", "use NFKC here")]
