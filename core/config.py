"""Configuration: the user's `config.toml` and the repo's `.laneboard.toml` (DESIGN.md section 11).

The user file lives in `$LANEBOARD_HOME` when that is set (so one variable isolates a test, a
script or a second board), else in the platform's config dir. The repo file at the root overrides
the user file section by section. A bad file is reported with its path and the offending field;
nothing is guessed.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import ConfigError
from core.names import check_branch_prefix

REPO_CONFIG_NAME = ".laneboard.toml"
USER_CONFIG_NAME = "config.toml"

DEFAULT_REBUILDABLE = [
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
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WorktreeSettings(_Section):
    area: Literal["inside", "sibling"] = "inside"
    """`inside`: `<root>/.worktrees/<name>`; `sibling`: `<root>/../<repo>.worktrees/<name>` (for
    tools such as Cargo that search parent directories for their config)."""


class LaneSettings(_Section):
    slots: int = Field(default_factory=lambda: max(1, os.cpu_count() or 1), ge=1)
    """Machine-wide number of leases that may run at once. `LANEBOARD_SLOTS` overrides it."""
    repo_cap: int | None = Field(default=None, ge=1)
    """At most this many running leases per repo; None means only `slots` limits it."""
    wrap: list[str] = Field(default_factory=list)
    """Commands routed through the task's lane by shims in the agent's PATH (`cargo`, `make` …)."""


class ProvisionSettings(_Section):
    copy_files: list[str] = Field(default_factory=list, alias="copy")
    """Untracked files (glob patterns relative to the root) copied into each new worktree."""
    setup: str | list[str] | None = None
    """Run in the new worktree after creation: a list is an argv; a string runs with
    `/bin/sh -c`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class CleanupSettings(_Section):
    rebuildable: list[str] = Field(default_factory=lambda: list(DEFAULT_REBUILDABLE))
    """Ignored files and directories that removal may delete because tools rebuild them."""


class AgentSettings(_Section):
    max_running: int = Field(default=4, ge=1)
    """Agent sessions that may run at once; further tasks wait in `queued`."""


class Settings(_Section):
    """Everything laneboard reads from configuration, merged from user and repo files."""

    branch_prefix: str = "lb"
    """Task branches are `<branch_prefix>/<task name>`."""
    worktrees: WorktreeSettings = Field(default_factory=WorktreeSettings)
    lanes: LaneSettings = Field(default_factory=LaneSettings)
    provision: ProvisionSettings = Field(default_factory=ProvisionSettings)
    cleanup: CleanupSettings = Field(default_factory=CleanupSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)
    gate: str | list[str] | None = None
    """The repo's check command, run before integration."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for commands run in a worktree (e.g. `CARGO_TARGET_DIR`)."""
    theme: str | None = None

    @field_validator("branch_prefix")
    @classmethod
    def _prefix_is_a_ref(cls, value: str) -> str:
        return check_branch_prefix(value)


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
    try:
        return Settings.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise ConfigError(f"{source}: field {field}: {first['msg']}") from None


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
        settings = settings.model_copy(
            update={"lanes": settings.lanes.model_copy(update={"slots": int(slots)})}
        )
    return settings
