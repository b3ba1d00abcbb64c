"""The merge queue's bisection: for any batch size and any culprit, the longest passing prefix
is found, the gate asked at most ⌈log2 n⌉ times, and never on a prefix already known."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from laneboard.core.domain.queue import bisect_runs, longest_passing_prefix, next_probe


@given(
    st.integers(min_value=2, max_value=200).flatmap(
        lambda size: st.tuples(st.just(size), st.integers(min_value=1, max_value=size))
    )
)
def test_the_culprit_is_found_in_log2_gate_runs(case: tuple[int, int]) -> None:
    size, culprit = case  # the gate fails on every prefix that holds task `culprit` (1-based)
    asked: list[int] = []

    def passes(prefix: int) -> bool:
        assert 0 < prefix < size and prefix not in asked
        asked.append(prefix)
        return prefix < culprit

    assert longest_passing_prefix(size, passes) == culprit - 1
    assert len(asked) <= math.ceil(math.log2(size)) == bisect_runs(size)


def test_the_eight_task_batch_of_the_issue_needs_at_most_seven_runs() -> None:
    for culprit in range(1, 9):
        runs = 1  # the top
        runs += sum(1 for _ in iter_probes(8, culprit))
        assert runs <= 1 + 2 * math.ceil(math.log2(8))


def iter_probes(size: int, culprit: int) -> list[int]:
    asked: list[int] = []
    longest_passing_prefix(size, lambda p: asked.append(p) or p < culprit)  # type: ignore[func-returns-value]
    return asked


def test_a_batch_of_one_is_its_own_culprit_without_a_probe() -> None:
    assert longest_passing_prefix(1, lambda p: pytest.fail("no probe for one task")) == 0
    assert bisect_runs(1) == 0
    with pytest.raises(ValueError):
        next_probe(3, 4)
