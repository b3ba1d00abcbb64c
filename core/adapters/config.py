"""Configuration: the user's `config.toml` and the repo's `.laneboard.toml` (DESIGN.md section 11).

The user file lives in `$LANEBOARD_HOME` when that is set (so one variable isolates a test, a
script or a second board), else in the platform's config dir. The repo file at the root overrides
the user file section by section. A bad file is reported with its path and the offending field;
nothing is guessed.

The settings are frozen value classes (`domain.values`); pydantic validates a file against
stdlib dataclass twins derived from them (`_twin`), so each setting is declared once. `laneboard
exec` runs for every shimmed command, so validation is remembered: a marker named by the hash of
the merged settings (and of this module) in the state dir's cache says that exact content passed
before, and then the settings are built without importing pydantic (or `dataclasses`) at all. A
changed file has another hash and is validated again.
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Literal, get_type_hints

from laneboard.core.adapters.filestamp import Stamp, settled, stamp
from laneboard.core.domain.errors import ConfigError, LaneboardError
from laneboard.core.domain.names import check_branch_prefix
from laneboard.core.domain.values import asdict, field, fields, is_value, replace, value

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
    ".gradle/",
    ".next/",
    "*.pyc",
)

_STRICT: dict[str, Any] = {"extra": "forbid"}


def _default_slots() -> int:
    return max(1, os.cpu_count() or 1)


@value
class WorktreeSettings:
    area: Literal["inside", "sibling"] = "inside"
    """`inside`: `<root>/.worktrees/<name>`; `sibling`: `<root>/../<repo>.worktrees/<name>` (for
    tools such as Cargo that search parent directories for their config)."""


@value
class LaneSettings:
    slots: int = field(default_factory=_default_slots)
    """Machine-wide number of leases that may run at once. `LANEBOARD_SLOTS` overrides it."""
    repo_cap: int | None = None
    """At most this many running leases per repo; None means only `slots` limits it."""
    wrap: tuple[str, ...] = ()
    """Commands routed through the task's lane by shims in the agent's PATH (`cargo`, `make` …)."""


@value
class ProvisionSettings:
    copy: tuple[str, ...] = ()
    """Untracked files (glob patterns relative to the root) copied into each new worktree."""
    setup: str | tuple[str, ...] | None = None
    """Run in the new worktree after creation: a list is an argv; a string runs with
    `/bin/sh -c`."""


@value
class CleanupSettings:
    rebuildable: tuple[str, ...] = DEFAULT_REBUILDABLE
    """Ignored files and directories that removal may delete because tools rebuild them."""
    trust_pid_namespace: bool = False
    """Inside a PID namespace of its own (a container), laneboard cannot see processes outside
    it that may be working in a worktree, and refuses removal; true accepts that risk."""


@value
class AgentSettings:
    max_running: int = 4
    """Agent sessions that may run at once; further tasks wait in `queued`."""
    default: str = "claude"
    """The profile `new` starts when neither `--agent` nor `--cmd` is given."""
    tmux_socket: str | None = None
    """The tmux server for agents: a socket name or path (default: the user's default server;
    `LANEBOARD_TMUX_SOCKET` overrides)."""
    stop_grace: float = 10.0
    """Seconds an agent has to quit after SIGTERM (pause, retain) before its processes are
    killed."""
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`[agents.profiles.<name>]`: fields that override a built-in profile, or a new profile
    (`command` required); see `core.domain.agents.Profile`."""


@value
class FinalizeSettings:
    strategy: Literal["merge", "squash", "rebase"] = "merge"
    """How `finalize --merge` integrates: a merge commit (the reviewed SHA stays an ancestor of
    the target), one squash commit, or the commits replayed onto the target."""
    remote: str = "origin"
    """The remote `finalize --publish` pushes to."""
    network_timeout: float = 120.0
    """Seconds a push, `ls-remote` or `gh` call may take."""
    queue_batch: int = 8
    """The most tasks the merge queue integrates in one batch (gated once together)."""


@value
class ConfineSettings:
    mode: Literal["required", "auto", "off"] = "auto"
    """Run agent panes and `exec --lane` commands under bubblewrap: `required` refuses to run
    them unconfined, `auto` confines when bwrap works here (else runs unconfined and says so),
    `off` never confines."""


@value
class BoardSettings:
    bell: bool = True
    """Ring the terminal bell when a task starts waiting for you or becomes ready for review."""
    keys: dict[str, str] = field(default_factory=dict)
    """Key map: a binding id (`laneboard.discard`, `board.quit`; the help screen lists them)
    to the keys that trigger it, comma-separated (`"x,delete"`)."""
    preview_lines: int = 200
    """Lines of the selected pane's screen the preview reads."""
    desktop: Literal["auto", "notify-send", "osc9", "osc777", "off"] = "auto"
    """How a task that starts needing you is told while the board is not in front of you:
    `auto` writes the terminal's OSC 9 notification when the board runs inside tmux or over
    ssh (the desktop is where the terminal is), else runs `notify-send` when it is installed."""
    ntfy: str | None = None
    """An ntfy topic URL (`https://ntfy.sh/<topic>`) to push to when a task blocks on you
    (waiting, failed, ready for review) and the board is not in front of you."""
    webhook: str | None = None
    """A URL that gets the same pushes as a JSON POST (`task`, `repo`, `kind`, `message`)."""
    push_every: float = 300.0
    """Seconds before the same task is pushed about the same thing again; at most 6 pushes go
    out in any such span, whatever the tasks."""


@value
class DelegationSettings:
    max_children: int = 8
    """Live children one task may have at once (`new --parent`, MCP `delegate`)."""
    max_depth: int = 2
    """How deep the tree may grow: a top-level task is depth 0, its children depth 1; a task at
    `max_depth` cannot spawn."""


@value
class CheckpointSettings:
    enabled: bool = True
    """Save the worktree as a checkpoint at the end of each agent turn (the controller does)."""
    keep: int = 30
    """The most checkpoints kept per task (the oldest go first; never a pinned one)."""
    max_mb: float = 500.0
    """The most megabytes of changed files a task's checkpoints hold together."""


@value
class Settings:
    """Everything laneboard reads from configuration, merged from user and repo files."""

    branch_prefix: str = "lb"
    """Task branches are `<branch_prefix>/<task name>/work`: one directory of refs per task."""
    worktrees: WorktreeSettings = field(default_factory=WorktreeSettings)
    lanes: LaneSettings = field(default_factory=LaneSettings)
    provision: ProvisionSettings = field(default_factory=ProvisionSettings)
    cleanup: CleanupSettings = field(default_factory=CleanupSettings)
    agents: AgentSettings = field(default_factory=AgentSettings)
    gate: str | tuple[str, ...] | None = None
    """The repo's check command, run on the integration result in a scratch worktree before
    the target moves (a string runs with `/bin/sh -c`)."""
    finalize: FinalizeSettings = field(default_factory=FinalizeSettings)
    confine: ConfineSettings = field(default_factory=ConfineSettings)
    target: str | None = None
    """The branch tasks are integrated into; default: the branch `origin/HEAD` names, else the
    branch the root has checked out."""
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment for commands run in a worktree (e.g. `CARGO_TARGET_DIR`)."""
    theme: str | None = None
    """The board's theme: `laneboard-dark` (default), `laneboard-light`, `laneboard-contrast`,
    or any theme Textual ships; the board's theme switch writes it here."""
    board: BoardSettings = field(default_factory=BoardSettings)
    delegation: DelegationSettings = field(default_factory=DelegationSettings)
    checkpoints: CheckpointSettings = field(default_factory=CheckpointSettings)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    """`[hosts.<name>]`: other machines that run tasks over ssh (`ssh`, `ssh_config`,
    `laneboard`, `connect_timeout`, `timeout`, `poll`); read by `core.adapters.hosts`
    (docs/hosts.md)."""


def home() -> Path | None:
    """`$LANEBOARD_HOME` if set: the one directory holding ledger and user config."""
    named = os.environ.get("LANEBOARD_HOME")
    return Path(named).expanduser() if named else None


def state_dir() -> Path:
    """Where the ledger lives."""
    found = home()
    if found is None:
        import platformdirs

        found = Path(platformdirs.user_state_dir("laneboard"))
    return found


def config_dir() -> Path:
    """Where the user's `config.toml` lives."""
    found = home()
    if found is None:
        import platformdirs

        found = Path(platformdirs.user_config_dir("laneboard"))
    return found


def _read_text(path: Path) -> str | None:
    """The text of the configuration file `path`, or None when there is none. Every file
    laneboard reads its settings from is read here: one that cannot be read, or is not UTF-8
    (as TOML must be), is a `ConfigError` naming the file and the first byte that is not."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start})"
        ) from None


def _read_toml(path: Path) -> dict[str, Any]:
    text = _read_text(path)
    if text is None:
        return {}
    import tomllib  # only when there is a file to read

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, given in over.items():
        if isinstance(given, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], given)
        else:
            merged[key] = given
    return merged


def validate(data: dict[str, Any], source: str) -> Settings:
    """The settings `data` describes, or `ConfigError` naming `source` and the field."""
    if not data:
        return Settings()
    marker = cache_marker(data)
    if marker is not None:
        try:
            normalized = json.loads(marker.read_text())
        except (OSError, ValueError):
            pass  # no marker (or a damaged one): validate
        else:
            built: Settings = build(Settings, normalized)
            return built
    import dataclasses

    from pydantic import TypeAdapter, ValidationError

    try:
        checked = TypeAdapter(_twin(Settings)).validate_python(data)
    except ValidationError as err:
        first = err.errors()[0]
        raise ConfigError(f"{source}: field {_where(first['loc'])}: {_plain(first)}") from None
    settings: Settings = build(Settings, dataclasses.asdict(checked))
    problem = _problem(settings)
    if problem:
        raise ConfigError(f"{source}: field {problem}")
    if marker is not None:
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            temporary = marker.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(asdict(settings)))
            os.replace(temporary, marker)
        except OSError:
            pass  # only a cache: validation simply runs again next time
    return settings


def _where(loc: tuple[Any, ...]) -> str:
    """`lanes.wrap[0]` from pydantic's location; a union's branch name (`str`) is left out."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts[-1:] = [f"{parts[-1]}[{part}]"] if parts else [f"[{part}]"]
        elif part not in ("str", "tuple[str, ...]", "function-after[_validate(), str]"):
            parts.append(str(part))
    return ".".join(parts) or "(top level)"


_PLAIN = {
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "string_type": "expected a string",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "dict_type": "expected a table",
    "dataclass_type": "expected a table ([section])",
    "unexpected_keyword_argument": "not a setting laneboard knows",
    "extra_forbidden": "not a setting laneboard knows",
    "missing": "is required",
}


def _plain(error: Any) -> str:
    """pydantic's complaint in the words of a config file ("expected a list", not "Input
    should be a valid tuple")."""
    if error["type"] == "literal_error":
        return f"expected {error.get('ctx', {}).get('expected', 'one of the allowed values')}"
    return _PLAIN.get(error["type"], str(error["msg"]))


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _problem(settings: Settings) -> str | None:
    """What pydantic's types cannot say: ranges, ref-name rules, plain command names."""
    for where, number in (
        ("lanes.slots", settings.lanes.slots),
        ("lanes.repo_cap", settings.lanes.repo_cap),
        ("agents.max_running", settings.agents.max_running),
        ("delegation.max_children", settings.delegation.max_children),
        ("finalize.queue_batch", settings.finalize.queue_batch),
        ("checkpoints.keep", settings.checkpoints.keep),
    ):
        if number is not None and number < 1:
            return f"{where}: must be at least 1"
    from laneboard.core.domain.agents import profiles

    if settings.delegation.max_depth < 0:
        return "delegation.max_depth: must not be negative"
    if settings.agents.stop_grace < 0:
        return "agents.stop_grace: must not be negative"
    if settings.finalize.network_timeout <= 0:
        return "finalize.network_timeout: must be more than 0"
    for key in settings.env:
        if not _ENV_NAME.fullmatch(key):
            return f"env: {key!r} is not an environment variable name"
    for name, given in settings.agents.profiles.items():
        extra = given.get("env")
        for key in extra if isinstance(extra, dict) else ():
            if not _ENV_NAME.fullmatch(str(key)):
                return f"agents.profiles.{name}.env: {key!r} is not an environment variable name"

    try:
        profiles(settings.agents.profiles)
    except ValueError as err:
        return f"agents.profiles.{err}"
    if settings.agents.default not in profiles(settings.agents.profiles):
        return f"agents.default: no profile named {settings.agents.default!r}"
    try:
        check_branch_prefix(settings.branch_prefix)
    except LaneboardError as err:
        return f"branch_prefix: {err}"
    for command in settings.lanes.wrap:
        if not command or "/" in command or command.startswith(".") or command.split() != [command]:
            return f"lanes.wrap: {command!r} is not a plain command name"
    return None


_SCHEMA_FILES = (Path(__file__), Path(__file__).parent.parent / "domain" / "names.py")
"""This module and the name rules: what decides the settings' types and rules."""


@functools.cache
def _schema() -> str:
    """A hash of `_SCHEMA_FILES`: changes to the settings' types or rules invalidate every
    marker. Computed on first use (not at import: `exec` may need no config)."""
    import hashlib

    return hashlib.sha256(b"".join(path.read_bytes() for path in _SCHEMA_FILES)).hexdigest()


def cache_marker(data: dict[str, Any]) -> Path | None:
    """The marker file that says `data` passed validation by this version of this module; it
    holds the validated, normalized settings (pydantic's conversions applied) as JSON."""
    try:
        canonical = json.dumps(data, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return None
    import hashlib

    digest = hashlib.sha256(f"{_schema()}\0{canonical}".encode()).hexdigest()
    return state_dir() / "cache" / "config" / digest


@functools.cache
def _twin(cls: Any) -> Any:
    """A stdlib dataclass with the fields, types and defaults of the value class `cls` (nested
    settings by their twins), for pydantic to validate against; built only when validating."""
    import dataclasses

    hints = get_type_hints(cls)
    specs: list[Any] = []
    for item in fields(cls):
        hint = hints[item.name]
        if is_value(hint):
            specs.append((item.name, _twin(hint), dataclasses.field(default_factory=_twin(hint))))
        elif item.factory is not None:
            specs.append((item.name, hint, dataclasses.field(default_factory=item.factory)))
        elif item.required:
            specs.append((item.name, hint))
        else:
            specs.append((item.name, hint, dataclasses.field(default=item.default)))
    return dataclasses.make_dataclass(
        cls.__name__, specs, frozen=True, namespace={"__pydantic_config__": _STRICT}
    )


@functools.cache
def _hints(cls: Any) -> dict[str, Any]:
    """The resolved field types of a settings class (resolving them compiles every string
    annotation: once per class, not once per `load_settings`)."""
    return get_type_hints(cls)


def build(cls: Any, data: dict[str, Any]) -> Any:
    """Rebuild settings from their validated, normalized JSON (lists become tuples, tables the
    nested value classes), without pydantic."""
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for item in fields(cls):
        if item.name not in data:
            continue
        given = data[item.name]
        hint = hints[item.name]
        if isinstance(given, dict) and is_value(hint):
            given = build(hint, given)
        elif isinstance(given, list):
            given = tuple(given)
        values[item.name] = given
    return cls(**values)


_LOADED: dict[tuple[str, str | None, str | None], tuple[tuple[Stamp, ...], Settings]] = {}
"""Settings already read, with the stamps of the files they came from (a long-running board
asks for them on every refresh: the files are read again only when one changed)."""


def load_settings(root: Path | None = None) -> Settings:
    """Merge the user file and (when `root` is given) the repo file; environment overrides last.

    Each file is validated on its own first, so an error names the file that holds it. Settings
    are read again whenever a file changed (by its stamp, `core.adapters.filestamp`).
    """
    user_path = config_dir() / USER_CONFIG_NAME
    repo_path = root / REPO_CONFIG_NAME if root is not None else None
    key = (str(user_path), str(repo_path) if repo_path else None, os.environ.get("LANEBOARD_SLOTS"))
    files = [path for path in (user_path, repo_path) if path]
    stamps = tuple(stamp(path, follow=True) for path in files)
    known = _LOADED.get(key)
    if known is not None and known[0] == stamps:
        return known[1]
    from laneboard.core.adapters.stampcache import shared

    # Another process's settings hold while the files and the code that read them are the
    # same (the module files' stamps stand for the settings' types and rules).
    kept_key = "\0".join([*map(str, key), str(os.cpu_count())])
    kept_from = [*stamps, *(stamp(path) for path in _SCHEMA_FILES)]
    kept = shared("settings").get(kept_key, lambda _: kept_from)
    if isinstance(kept, dict):
        settings: Settings = build(Settings, kept)
        _LOADED[key] = (stamps, settings)
        return settings
    started = time.time()
    settings = _load_settings(user_path, repo_path)
    if settled(stamps, started) and stamps == tuple(stamp(path, follow=True) for path in files):
        _LOADED[key] = (stamps, settings)
        if settled(kept_from, started):
            shared("settings").put(kept_key, kept_from, asdict(settings))
    return settings


def _load_settings(user_path: Path, repo_path: Path | None) -> Settings:
    data = _read_toml(user_path)
    validate(data, str(user_path))
    if repo_path is not None:
        repo_data = _read_toml(repo_path)
        validate(repo_data, str(repo_path))
        if "slots" in repo_data.get("lanes", {}):
            raise ConfigError(
                f"{repo_path}: field lanes.slots: slots are machine-wide; set them in "
                f"{user_path} (a repo can cap itself with lanes.repo_cap)"
            )
        data = _merge(data, repo_data)
    settings = validate(data, "configuration")
    slots = os.environ.get("LANEBOARD_SLOTS")
    if slots is not None:
        if not slots.isdigit() or int(slots) < 1:
            raise ConfigError(f"LANEBOARD_SLOTS={slots!r}: must be a whole number of at least 1")

        settings = replace(settings, lanes=replace(settings.lanes, slots=int(slots)))
    return settings


def save_user_value(key: str, text: str) -> Path:
    """Set the top-level string `key` of the user's `config.toml` to `text`, keeping every
    other line as it is (a `key = ...` line before the first table is replaced, else one is
    put first). The result must still be valid settings, or nothing is written. A symlinked
    file is written where it links to, with the mode it had."""
    path = config_dir() / USER_CONFIG_NAME
    lines = (_read_text(path) or "").splitlines(keepends=True)
    setting = f"{key} = {json.dumps(text)}\n"
    pattern = re.compile(rf"\s*{re.escape(key)}\s*=")
    for number, line in enumerate(lines):
        if line.lstrip().startswith("["):
            lines.insert(0, setting)
            break
        if pattern.match(line):
            lines[number] = setting
            break
    else:
        lines.insert(0, setting)
    return _replace_user_file(path, "".join(lines))


def save_user_table(name: str, values: dict[str, Any]) -> Path:
    """Add the table `[name]` with `values` (strings and numbers) at the end of the user's
    `config.toml`, keeping every other line as it is; refused when the table is there already.
    The result must still be valid settings, or nothing is written."""
    path = config_dir() / USER_CONFIG_NAME
    text = _read_text(path) or ""
    header = f"[{name}]"
    if any(line.strip() == header for line in text.splitlines()):
        raise ConfigError(f"{path}: {header} is there already")
    lines = [header, *(f"{key} = {json.dumps(given)}" for key, given in values.items())]
    separator = "" if not text else "\n" if text.endswith("\n") else "\n\n"
    return _replace_user_file(path, text + separator + "\n".join(lines) + "\n")


def set_user_value(name: str, key: str, given: str | float) -> Path:
    """Set `key` of the table `[name]` in the user's `config.toml` (the line replaced, or added
    right under the table's header), keeping every other line as it is; refused when the table
    is not there. The result must still be valid settings, or nothing is written."""
    path = config_dir() / USER_CONFIG_NAME
    lines = (_read_text(path) or "").splitlines()
    header = f"[{name}]"
    try:
        at = next(n for n, line in enumerate(lines) if line.strip() == header)
    except StopIteration:
        raise ConfigError(f"{path}: no table {header}") from None
    end = next(
        (n for n in range(at + 1, len(lines)) if lines[n].lstrip().startswith("[")), len(lines)
    )
    line = f"{key} = {json.dumps(given)}"
    found = [n for n in range(at + 1, end) if lines[n].split("=", 1)[0].strip() == key]
    if found:
        lines[found[0]] = line
    else:
        lines.insert(at + 1, line)
    return _replace_user_file(path, "\n".join(lines) + "\n")


def _replace_user_file(path: Path, content: str) -> Path:
    """Write `content` as the user's config file, atomically, once it validates. A symlinked
    file is written where it links to, with the mode it had."""
    import tomllib

    try:
        validate(tomllib.loads(content), str(path))
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML: {err}") from None
    target = path.resolve()  # a config.toml that links to a dotfile: write the dotfile
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
    os.chmod(temporary, mode)  # as the file was, whatever the umask
    os.replace(temporary, target)
    return target
