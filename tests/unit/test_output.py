"""How the CLI writes times: the same ISO 8601 text `datetime` writes, without importing it."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import example, given
from hypothesis import strategies as st

from laneboard.tui.output import iso


@example(1.001)
@example(0.9995)
@example(1_700_000_000.9999996)
@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_iso_agrees_with_datetime(at: float) -> None:
    expected = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    assert iso(at) == expected.replace("+00:00", "Z")


def test_iso_of_nothing_is_nothing() -> None:
    assert iso(None) is None


def test_iso_rounds_the_fraction_alone_as_datetime_does() -> None:
    """`x.4999995` is `x.499999` to datetime (the fraction is rounded, not the whole time,
    whose last bits a float has lost)."""
    for at in (216_973_453.4999995, 262_347_997.9999995):
        expected = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
        assert iso(at) == expected.replace("+00:00", "Z")
