"""`@value`: laneboard's value classes behave as frozen dataclasses do, for what the code uses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from laneboard.core.domain.values import FrozenError, asdict, field, fields, replace, value


@value
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = field(default_factory=tuple)


@value
class Labelled(Point):
    label: str = "p"


@value(frozen=False)
class Counter:
    seen: list[int] = field(default_factory=list)


@value
class Checked:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError("negative")


@dataclasses.dataclass(frozen=True)
class Reference:
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()


@settings(max_examples=30)  # equality, hashing and repr of three fields: a few dozen suffice
@given(st.integers(), st.integers(), st.lists(st.text(max_size=3), max_size=3).map(tuple))
def test_it_agrees_with_a_frozen_dataclass(x: int, y: int, tags: tuple[str, ...]) -> None:
    ours, theirs = Point(x, y, tags), Reference(x, y, tags)
    assert repr(ours) == repr(theirs).replace("Reference", "Point")
    assert (ours == Point(x, y, tags)) is True
    assert (ours == Point(x, y + 1, tags)) is False
    assert hash(ours) == hash(Point(x=x, y=y, tags=tags))
    assert asdict(ours) == dataclasses.asdict(theirs)
    assert replace(ours, y=y + 1) == Point(x, y + 1, tags)


def test_fields_are_frozen() -> None:
    point = Point(1)
    with pytest.raises(FrozenError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenError):
        del point.x
    assert point.x == 1


def test_a_mutable_value_is_writable_and_unhashable() -> None:
    first, second = Counter(), Counter()
    first.seen.append(1)
    assert second.seen == []  # each instance gets its own list from the factory
    first.seen = [2]
    assert first == Counter([2])
    with pytest.raises(TypeError):
        hash(first)


def test_a_subclass_adds_its_fields_after_its_bases() -> None:
    labelled = Labelled(1, 2, (), "q")
    assert [spec.name for spec in fields(labelled)] == ["x", "y", "tags", "label"]
    assert labelled != Point(1, 2, ())  # another class is never equal
    assert Labelled(1).label == "p"


def test_post_init_runs() -> None:
    with pytest.raises(ValueError, match="negative"):
        Checked(-1)
    assert Checked(1).n == 1


UNTYPED: Any = Point
"""`Point` as a type checker will not check, for calls that are wrong on purpose."""


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: UNTYPED(), "missing x"),
        (lambda: UNTYPED(1, x=2), "two values for x"),
        (lambda: UNTYPED(1, z=3), "unknown fields: z"),
        (lambda: UNTYPED(1, 2, (), 4), "takes 3 arguments"),
        (lambda: replace(Point(1), z=1), "no fields z"),
    ],
)
def test_a_wrong_construction_is_a_type_error(make: Callable[[], object], message: str) -> None:
    with pytest.raises(TypeError, match=message):
        make()


def test_a_required_field_after_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="without a default follows"):

        @value
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]


def test_match_args_allow_positional_patterns() -> None:
    match Point(1, 2):
        case Point(x, y):
            assert (x, y) == (1, 2)
        case _:
            pytest.fail("no match")
