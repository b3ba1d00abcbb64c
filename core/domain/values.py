"""Value classes without the cost of `dataclasses` at import time.

`@value` turns a class with annotated fields into an immutable value: keyword or positional
construction in field order, defaults and `field(default_factory=...)`, `__post_init__`, equality
and hashing by field values (only with a value of the same class), a readable `repr`, and
`replace`/`fields`/`asdict`. `@value(frozen=False)` leaves the instance writable (and unhashable).
Type checkers see it as `dataclasses.dataclass` (`typing.dataclass_transform`).

Why not `dataclasses`: it compiles six methods from source for every frozen class. laneboard has
fifty value classes and every command line start pays for them (about 1 ms each on the
development machine, more than half of `laneboard show`'s start-up before any work). These
methods are shared closures over a class's field list instead: nothing is compiled.

Pure: no I/O. Inheritance adds a subclass's fields after its bases' (as `dataclasses` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["FrozenError", "asdict", "field", "fields", "replace", "value"]

T = TypeVar("T")
_FIELDS = "__value_fields__"
_MISSING: Any = object()


class FrozenError(AttributeError):
    """An attribute of a frozen value was assigned or deleted."""


class Field:
    """One field of a value class: its name, its default or default factory."""

    __slots__ = ("default", "factory", "name")

    def __init__(self, default: Any = _MISSING, factory: Callable[[], Any] | None = None) -> None:
        self.name = ""
        self.default = default
        self.factory = factory

    def fresh(self) -> Any:
        """The field's default for one new instance (the factory's result, if it has one)."""
        return self.factory() if self.factory is not None else self.default

    @property
    def required(self) -> bool:
        return self.factory is None and self.default is _MISSING


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field's default (`default=`) or a factory called for each new instance."""
    return Field(default, default_factory)


def _collect(cls: type) -> tuple[Field, ...]:
    found: dict[str, Field] = {}
    for base in reversed(cls.__mro__[1:]):
        for spec in getattr(base, _FIELDS, ()):
            found[spec.name] = spec
    own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (inspect is slow to import)
    for name, annotation in own.items():
        if str(annotation).startswith(("ClassVar", "typing.ClassVar")):
            continue
        given = cls.__dict__.get(name, _MISSING)
        if isinstance(given, Field):
            spec = given
            if spec.factory is None and spec.default is not _MISSING:
                setattr(cls, name, spec.default)
            else:
                delattr(cls, name)
        else:
            spec = Field(given)
        spec.name = name
        found[name] = spec
    specs = tuple(found.values())
    seen_default = False
    for spec in specs:
        if not spec.required:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{cls.__name__}: field {spec.name} without a default follows one with")
    return specs


def _init(specs: tuple[Field, ...], name: str) -> Callable[..., None]:
    names = frozenset(spec.name for spec in specs)
    required = frozenset(spec.name for spec in specs if spec.required)
    defaults = {s.name: s.default for s in specs if s.factory is None and not s.required}
    factories = tuple(spec for spec in specs if spec.factory is not None)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if not args and required <= kwargs.keys() <= names:
            # The common call (every field by keyword, none unknown, none missing): the
            # fields go straight into the instance's dict. Any other call takes the long way,
            # which also says what is wrong with it.
            made = dict(defaults)
            for spec in factories:
                if spec.name not in kwargs:
                    made[spec.name] = spec.factory()  # type: ignore[misc]
            made.update(kwargs)
            self.__dict__.update(made)
            post = getattr(self, "__post_init__", None)
            if post is not None:
                post()
            return
        if len(args) > len(specs):
            raise TypeError(f"{name}() takes {len(specs)} arguments, {len(args)} given")
        setter = object.__setattr__
        for spec, given in zip(specs, args, strict=False):
            if spec.name in kwargs:
                raise TypeError(f"{name}() got two values for {spec.name}")
            setter(self, spec.name, given)
        for spec in specs[len(args) :]:
            given = kwargs.pop(spec.name, _MISSING)
            if given is _MISSING:
                if spec.required:
                    raise TypeError(f"{name}() is missing {spec.name}")
                given = spec.fresh()
            setter(self, spec.name, given)
        if kwargs:
            raise TypeError(f"{name}() got unknown fields: {', '.join(sorted(kwargs))}")
        post = getattr(self, "__post_init__", None)
        if post is not None:
            post()

    return __init__


def _values(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, spec.name) for spec in getattr(self, _FIELDS))


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _repr(self: Any) -> str:
    specs = getattr(self, _FIELDS)
    shown = ", ".join(f"{spec.name}={getattr(self, spec.name)!r}" for spec in specs)
    return f"{self.__class__.__qualname__}({shown})"


def _frozen_setattr(self: Any, name: str, given: Any) -> None:
    raise FrozenError(f"cannot assign to field {name!r} of a frozen {self.__class__.__name__}")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenError(f"cannot delete field {name!r} of a frozen {self.__class__.__name__}")


def _make(cls: type[T], frozen: bool) -> type[T]:
    specs = _collect(cls)
    methods: dict[str, Any] = {
        _FIELDS: specs,
        "__init__": _init(specs, cls.__name__),
        "__repr__": _repr,
        "__eq__": _eq,
        "__match_args__": tuple(spec.name for spec in specs),
        "__hash__": _hash if frozen else None,
    }
    if frozen:
        methods.update(__setattr__=_frozen_setattr, __delattr__=_frozen_delattr)
    for name, method in methods.items():
        setattr(cls, name, method)
    return cls


@overload
def value(cls: type[T], /) -> type[T]: ...
@overload
def value(*, frozen: bool = True) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[T] | None = None, /, *, frozen: bool = True) -> Any:
    """Make `cls` a value class (see the module's docstring)."""
    if cls is None:
        return lambda inner: _make(inner, frozen)
    return _make(cls, frozen)


def fields(obj: Any) -> tuple[Field, ...]:
    """The fields of a value class or instance, in order."""
    return tuple(getattr(obj, _FIELDS))


def is_value(obj: Any) -> bool:
    return hasattr(obj, _FIELDS)


def replace(obj: T, **changes: Any) -> T:
    """A copy of `obj` with some fields given new values."""
    current = {spec.name: getattr(obj, spec.name) for spec in fields(obj)}
    unknown = set(changes) - set(current)
    if unknown:
        raise TypeError(f"{obj.__class__.__name__} has no fields {', '.join(sorted(unknown))}")
    current.update(changes)
    return obj.__class__(**current)


def asdict(obj: Any) -> Any:
    """`obj` as plain data: value classes become dicts, lists and tuples are walked."""
    if is_value(obj) and not isinstance(obj, type):
        return {spec.name: asdict(getattr(obj, spec.name)) for spec in fields(obj)}
    if isinstance(obj, list | tuple):
        return type(obj)(asdict(item) for item in obj)
    if isinstance(obj, dict):
        return {key: asdict(item) for key, item in obj.items()}
    return obj
