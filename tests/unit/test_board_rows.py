"""The board's pure decisions: what needs the operator, in which order, and what each cell
says (from the fixed boards of the snapshot tests)."""

from __future__ import annotations

from laneboard.core.domain.attention import Attention, attention, counts, needs
from laneboard.tui.board.rows import COLUMNS, Filter, arrange, fit, git_cell, rows
from tests.tui.boards import NOW, busy_update, clean


def busy_rows():  # type: ignore[no-untyped-def]
    update = busy_update()
    return rows(update.snapshot.repos, update.radar, NOW)


def test_every_kind_of_need_is_told_apart_and_sorted_most_urgent_first() -> None:
    found = {row.name: row.attention for row in busy_rows()}
    assert found["login-fix"] is Attention.WAITING
    assert found["cart-merge"] is Attention.CONFLICTED  # conflicted files in its worktree
    assert found["search-index"] is Attention.CONFLICTED  # the radar, though ready for review
    assert found["flaky-tests"] is Attention.FAILED  # exited 1
    assert found["moved-away"] is Attention.FAILED  # fails verification
    assert found["perf"] is Attention.LOST
    assert found["checkout-flow"] is Attention.NONE
    ordered = [row.attention for row in arrange(busy_rows(), Filter())]
    assert ordered == sorted(ordered, key=lambda kind: kind.value)
    assert counts(found.values())[Attention.FAILED] == 2


def test_ready_for_review_needs_me_and_every_marker_is_distinct() -> None:
    view = busy_update().snapshot.repos[0].tasks[2]
    assert view.task.name == "search-index"
    assert attention(view, radar_conflicts=0) is Attention.REVIEW
    # a conflict does not hide that it is ready for review: it asks for both
    assert needs(view, radar_conflicts=1) == (Attention.CONFLICTED, Attention.REVIEW)
    markers = [kind.marker for kind in Attention if kind is not Attention.NONE]
    assert len(set(markers)) == len(markers) and " " not in markers


def test_git_cell_counts_each_kind_and_the_distance_to_the_target() -> None:
    assert git_cell(clean()) == "clean"
    assert git_cell(clean(2, 1, modified=3, untracked=1)) == "M3 ?1 ↑2 ↓1"
    assert git_cell(clean(conflicted=2, staged=1)) == "C2 S1"
    assert git_cell(None) == "…"


def test_narrow_terminals_drop_the_least_important_columns_first() -> None:
    wide = [c.key for c in fit(200)]
    assert wide == [c.key for c in COLUMNS]
    narrow = [c.key for c in fit(80)]
    assert {"mark", "name", "state", "agent", "git"} <= set(narrow)
    assert "branch" not in narrow and "pane" not in narrow
    assert sum(c.width + 1 for c in fit(80)) <= 80
    assert "repo" not in [c.key for c in fit(200, many_repos=False)]


def test_filters_by_words_repository_and_need() -> None:
    every = busy_rows()
    assert [r.name for r in arrange(every, Filter(text="checkout"))] == ["checkout-flow"]
    # every cell is searched: the radar names cart-merge on search-index's row too
    assert {r.name for r in arrange(every, Filter(text="cart"))} == {"cart-merge", "search-index"}
    assert {r.repo for r in arrange(every, Filter(repo="api"))} == {"api"}
    needing = arrange(every, Filter(needs_you=True))
    assert needing and all(r.attention is not Attention.NONE for r in needing)


def test_a_key_map_keeps_good_entries_and_names_the_bad_ones() -> None:
    from laneboard.tui.board.app import checked_keymap

    known = {"laneboard.discard", "board.quit", "board.help"}
    kept, problems = checked_keymap(
        {
            "laneboard.discard": "x, delete",
            "board.quit": "ctrl+",
            "board.help": "not-a-real-key!!",
            "no.such": "y",
        },
        known,
    )
    assert kept == {"laneboard.discard": "x,delete"}
    assert len(problems) == 3 and any("no.such" in p for p in problems)


def test_rows_made_again_only_where_an_input_changed() -> None:
    """The board keeps the rows it made (`known`): a row is reused only for the same view with
    the same conflicts, unseen turn, age and lane, and is always what a fresh call makes."""
    from laneboard.core.domain.values import replace

    update = busy_update()
    boards, radar = update.snapshot.repos, update.radar
    known: dict = {}  # type: ignore[type-arg]
    first = rows(boards, radar, NOW, known=known)
    assert first == rows(boards, radar, NOW)
    again = rows(boards, radar, NOW, known=known)
    assert all(a is b for a, b in zip(again, first, strict=True))  # nothing changed: reused

    # one task's view replaced (the feed re-read it): that row alone is made again
    board = boards[0]
    view = board.tasks[0]
    moved = replace(view, git=clean(modified=4))
    changed = (replace(board, tasks=(moved, *board.tasks[1:])), *boards[1:])
    made = rows(changed, radar, NOW, known=known)
    assert made == rows(changed, radar, NOW)
    assert made[0].cells["git"] == "M4" and made[0] is not first[0]
    assert all(a is b for a, b in zip(made[1:], first[1:], strict=True))

    # the clock, an unseen turn and the radar are inputs too
    later = rows(changed, radar, NOW + 7200, known=known)
    assert later == rows(changed, radar, NOW + 7200)
    assert [r.cells["age"] for r in later] != [r.cells["age"] for r in made]
    idle = board.tasks[3]  # cart-merge: its agent is idle, a finished turn is told
    unseen = frozenset({idle.task.id})
    told = rows(changed, radar, NOW + 7200, unseen, known=known)
    assert told == rows(changed, radar, NOW + 7200, unseen)
    assert told[3].needs != later[3].needs
    calm = rows(changed, {}, NOW + 7200, unseen, known=known)
    assert calm == rows(changed, {}, NOW + 7200, unseen)

    # a task no longer on the board is forgotten
    rows((replace(board, tasks=board.tasks[1:]),), {}, NOW, known=known)
    assert view.task.id not in known
