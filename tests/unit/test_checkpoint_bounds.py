"""Which checkpoints the bounds drop: the oldest first, never a pinned one, never the newest."""

from __future__ import annotations

from laneboard.core.domain.reviewloop import Checkpoint, outdated, to_drop


def made(n: int, size: int = 10, *, pinned: bool = False) -> Checkpoint:
    return Checkpoint("t", n, f"refs/laneboard/checkpoints/t/{n}", "a" * 40, float(n), "hook",
                      1, size, pinned)  # fmt: skip


def test_the_oldest_go_first_to_the_count() -> None:
    kept = [made(n) for n in range(1, 6)]
    assert [c.n for c in to_drop(kept, keep=3, max_bytes=10**9)] == [1, 2]


def test_a_pinned_one_stays_and_the_next_oldest_goes() -> None:
    kept = [made(1, pinned=True), made(2), made(3), made(4)]
    assert [c.n for c in to_drop(kept, keep=2, max_bytes=10**9)] == [2, 3]


def test_the_size_bound_never_drops_the_newest() -> None:
    kept = [made(1, 100), made(2, 100), made(3, 1000)]
    assert [c.n for c in to_drop(kept, keep=10, max_bytes=500)] == [1, 2]
    assert to_drop([made(1, 10**9)], keep=1, max_bytes=1) == []


def test_a_comment_is_outdated_when_its_line_reads_differently() -> None:
    from laneboard.core.domain.reviewloop import Comment, CommentState, Side

    comment = Comment(1, "t", "a.txt", 2, Side.NEW, "a" * 40, "fix", "line two", 0.0,
                      CommentState.OPEN)  # fmt: skip
    assert not outdated(comment, "line two")
    assert outdated(comment, "TWO") and outdated(comment, None)
