"""Configuration: the user's `config.toml` and the repo's `.laneboard.toml` (DESIGN.md section 11).

The user file lives in `$LANEBOARD_HOME` when that is set (so one variable isolates a test, a
script or a second board), else in the platform's config dir. The repo file at the root overrides
the user file section by section. A bad file is reported with its path and the offending field;
nothing is guessed.

The settings are plain frozen dataclasses validated by pydantic. pydantic is imported only when a
file actually holds settings, so `laneboard exec` on an unconfigured machine starts without it.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from annotated_types import Ge

from core.errors import ConfigError, LaneboardError
from core.names import check_branch_prefix

REPO_CONFIG_NAME = ".laneboard.toml"
USER_CONFIG_NAME = "config.toml"

DEFAULT_REBUILDABLE = (
    "node_modules/",
    "target/",
    ".venv/",
    "venv/",
    "__pycache__/",
    ".pytest_cache/",
    ".mypy_cache/",
    ".ruff_cache/",
    ".tox/",
    "dist/",
    "build/",
    ".gradle/",
    ".next/",
    "*.pyc",
)

Positive = Annotated[int, Ge(1)]
_STRICT: dict[str, Any] = {"extra": "forbid"}


def _default_slots() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class WorktreeSettings:
    __pydantic_config__ = _STRICT

    area: Literal["inside", "sibling"] = "inside"
    """`inside`: `<root>/.worktrees/<name>`; `sibling`: `<root>/../<repo>.worktrees/<name>` (for
    tools such as Cargo that search parent directories for their config)."""


@dataclass(frozen=True)
class LaneSettings:
    __pydantic_config__ = _STRICT

    slots: Positive = field(default_factory=_default_slots)
    """Machine-wide number of leases that may run at once. `LANEBOARD_SLOTS` overrides it."""
    repo_cap: Positive | None = None
    """At most this many running leases per repo; None means only `slots` limits it."""
    wrap: tuple[str, ...] = ()
    """Commands routed through the task's lane by shims in the agent's PATH (`cargo`, `make` …)."""


@dataclass(frozen=True)
class ProvisionSettings:
    __pydantic_config__ = _STRICT

    copy: tuple[str, ...] = ()
    """Untracked files (glob patterns relative to the root) copied into each new worktree."""
    setup: str | tuple[str, ...] | None = None
    """Run in the new worktree after creation: a list is an argv; a string runs with
    `/bin/sh -c`."""


@dataclass(frozen=True)
class CleanupSettings:
    __pydantic_config__ = _STRICT

    rebuildable: tuple[str, ...] = DEFAULT_REBUILDABLE
    """Ignored files and directories that removal may delete because tools rebuild them."""


@dataclass(frozen=True)
class AgentSettings:
    __pydantic_config__ = _STRICT

    max_running: Positive = 4
    """Agent sessions that may run at once; further tasks wait in `queued`."""


@dataclass(frozen=True)
class Settings:
    """Everything laneboard reads from configuration, merged from user and repo files."""

    __pydantic_config__ = _STRICT

    branch_prefix: str = "lb"
    """Task branches are `<branch_prefix>/<task name>`."""
    worktrees: WorktreeSettings = field(default_factory=WorktreeSettings)
    lanes: LaneSettings = field(default_factory=LaneSettings)
    provision: ProvisionSettings = field(default_factory=ProvisionSettings)
    cleanup: CleanupSettings = field(default_factory=CleanupSettings)
    agents: AgentSettings = field(default_factory=AgentSettings)
    gate: str | tuple[str, ...] | None = None
    """The repo's check command, run before integration."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for commands run in a worktree (e.g. `CARGO_TARGET_DIR`)."""
    theme: str | None = None


def home() -> Path | None:
    """`$LANEBOARD_HOME` if set: the one directory holding ledger and user config."""
    value = os.environ.get("LANEBOARD_HOME")
    return Path(value).expanduser() if value else None


def state_dir() -> Path:
    """Where the ledger lives."""
    return home() or Path(platformdirs.user_state_dir("laneboard"))


def config_dir() -> Path:
    """Where the user's `config.toml` lives."""
    return home() or Path(platformdirs.user_config_dir("laneboard"))


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _validate(data: dict[str, Any], source: str) -> Settings:
    if not data:
        return Settings()
    from pydantic import TypeAdapter, ValidationError

    try:
        settings = TypeAdapter(Settings).validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ConfigError(f"{source}: field {where}: {first['msg']}") from None
    try:
        check_branch_prefix(settings.branch_prefix)
    except LaneboardError as err:
        raise ConfigError(f"{source}: field branch_prefix: {err}") from None
    for command in settings.lanes.wrap:
        if not command or "/" in command or command.startswith(".") or command != command.strip():
            raise ConfigError(
                f"{source}: field lanes.wrap: {command!r} is not a plain command name"
            )
    return settings


def load_settings(root: Path | None = None) -> Settings:
    """Merge the user file and (when `root` is given) the repo file; environment overrides last.

    Each file is validated on its own first, so an error names the file that holds it.
    """
    user_path = config_dir() / USER_CONFIG_NAME
    data = _read_toml(user_path)
    _validate(data, str(user_path))
    if root is not None:
        repo_path = root / REPO_CONFIG_NAME
        repo_data = _read_toml(repo_path)
        _validate(repo_data, str(repo_path))
        data = _merge(data, repo_data)
    settings = _validate(data, "configuration")
    slots = os.environ.get("LANEBOARD_SLOTS")
    if slots is not None:
        if not slots.isdigit() or int(slots) < 1:
            raise ConfigError(f"LANEBOARD_SLOTS={slots!r}: must be a whole number of at least 1")
        from dataclasses import replace

        settings = replace(settings, lanes=replace(settings.lanes, slots=int(slots)))
    return settings
