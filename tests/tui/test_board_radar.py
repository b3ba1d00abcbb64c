"""What the board says of the conflict radar (issue 20, item 5): the review screen names the
other side of a conflicting pair whichever side its task is on, and the header counts every
kind of attention each task asks for (a task ready for review whose branch conflicts counts as
both). On the fixed board of the snapshot tests: search-index (ready for review) and cart-merge
conflict, and cart-merge conflicts with its target too."""

from __future__ import annotations

from textual.widgets import Static

from laneboard.tui.board.app import BoardApp
from laneboard.tui.board.review import ReviewScreen
from tests.tui.boards import NOW, StaticSource, busy_update


def board() -> BoardApp:
    update = busy_update()
    return BoardApp(StaticSource(update, None), clock=lambda: NOW, live=False, initial=update)


async def _review(name: str) -> str:
    app = board()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        for _ in range(len(app.rows)):
            selected = app._selected_ref()
            if selected is not None and selected.name == name:
                break
            await pilot.press("j")
        await pilot.press("R")
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ReviewScreen)
        return str(screen.query_one("#radar", Static).render())


async def test_the_review_of_the_second_task_of_a_pair_names_the_first() -> None:
    """Regression: cart-merge's review said `conflicts with cart-merge` (the screen took the
    pair's `other` whichever side its task was on)."""
    text = await _review("cart-merge")
    assert "conflicts with search-index: search/index.py" in text
    assert "conflicts with its target: cart.py" in text
    assert "cart-merge:" not in text


async def test_the_review_of_the_first_task_of_a_pair_names_the_second() -> None:
    text = await _review("search-index")
    assert text == "conflicts with cart-merge: search/index.py"


async def test_the_header_counts_a_task_under_every_kind_it_asks_for() -> None:
    """search-index is ready for review and conflicts with cart-merge: the header counts it as
    conflicted and as ready for review (it counted only the first), and its row shows both
    markers."""
    app = board()
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        header = str(app.header.render())
        row = next(r for r in app.all_rows if r.name == "search-index")
        assert row.cells["mark"] == "!*"
        cart = next(r for r in app.all_rows if r.name == "cart-merge")
        assert cart.cells["mark"] == "!"
        assert "! 2 conflicted" in header, header  # search-index and cart-merge: the pair
        assert "* 1 review" in header, header
