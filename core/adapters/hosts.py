"""The configured hosts (`[hosts.NAME]` in the user's config.toml) and what the local side keeps
of each: the last answer of its laneboard's `ls --json`, so that a host that stops answering
still shows its tasks (as `unreachable`) instead of losing them from view.

The host's own ledger is the truth for its tasks; the kept answer is a copy, replaced whole by
each new answer (written to a temporary file and renamed: a reader sees the old answer or the
new one, never half of one), never edited and never written back to the host.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from laneboard.core.adapters.config import (
    USER_CONFIG_NAME,
    config_dir,
    load_settings,
    save_user_table,
)
from laneboard.core.domain.errors import ConfigError, LaneboardError
from laneboard.core.domain.hosts import STREAM_HEARTBEAT, Host, UnknownHost, check_host_name

_FIELDS: dict[str, type | tuple[type, ...]] = {
    "ssh": str,
    "ssh_config": str,
    "laneboard": str,
    "connect_timeout": (int, float),
    "timeout": (int, float),
    "poll": (int, float),
    "silent": (int, float),
}


def _host(name: str, table: dict[str, Any]) -> Host:
    where = f"{config_dir() / USER_CONFIG_NAME}: field hosts.{name}"
    try:
        check_host_name(name)
    except LaneboardError as err:
        raise ConfigError(f"{where}: {err}") from None
    for key, given in table.items():
        kind = _FIELDS.get(key)
        if kind is None:
            raise ConfigError(f"{where}.{key}: unknown (known: {', '.join(_FIELDS)})")
        if not isinstance(given, kind) or isinstance(given, bool):
            raise ConfigError(f"{where}.{key}: {given!r} is not a {_kind(key)}")
    if not table.get("ssh"):
        raise ConfigError(f"{where}.ssh: required (the ssh destination, user@host or an alias)")
    for key in ("connect_timeout", "timeout", "poll"):
        if key in table and not table[key] > 0:
            raise ConfigError(f"{where}.{key}: must be more than 0 seconds")
    if "silent" in table and not table["silent"] >= 2 * STREAM_HEARTBEAT:
        raise ConfigError(
            f"{where}.silent: must be at least {2 * STREAM_HEARTBEAT:g} seconds (two heartbeats)"
        )
    return Host(
        name=name,
        destination=table["ssh"],
        ssh_config=table.get("ssh_config"),
        laneboard=table.get("laneboard") or "laneboard",
        connect_timeout=float(table.get("connect_timeout", Host.connect_timeout)),
        timeout=float(table.get("timeout", Host.timeout)),
        poll=float(table.get("poll", Host.poll)),
        silent=float(table.get("silent", Host.silent)),
    )


def _kind(key: str) -> str:
    return "string" if _FIELDS[key] is str else "number of seconds"


def load_hosts() -> dict[str, Host]:
    """Every configured host by name (from the user's config file alone: hosts are the
    operator's, not a repository's)."""
    tables = load_settings().hosts
    return {name: _host(name, dict(table)) for name, table in sorted(tables.items())}


def find_host(name: str) -> Host:
    hosts = load_hosts()
    if name not in hosts:
        known = ", ".join(hosts) or "none yet: `laneboard host add NAME DESTINATION`"
        raise UnknownHost(f"no host {name!r} (hosts: {known})")
    return hosts[name]


def save_host(host: Host) -> Path:
    """Add `host` to the user's config file (refused when a host of that name is there)."""
    if host.name in load_hosts():
        raise ConfigError(f"host {host.name} is configured already (laneboard host ls)")
    table: dict[str, Any] = {"ssh": host.destination}
    if host.ssh_config:
        table["ssh_config"] = host.ssh_config
    if host.laneboard != Host.laneboard:
        table["laneboard"] = host.laneboard
    return save_user_table(f"hosts.{host.name}", table)


class AnswerStore:
    """The last `ls --json` answer of each host, under `<state dir>/hosts/<name>/`."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "hosts"

    def _path(self, host: str) -> Path:
        return self.root / host / "tasks.json"

    def save(
        self,
        host: str,
        tasks: list[dict[str, Any]],
        *,
        at: float | None = None,
        origin: dict[str, Any] | None = None,
    ) -> None:
        """Keep `tasks` as the host's answer, seen at `at` (now by default); `origin` is what
        the host's stream said of its machine (kept from the answer before when not given)."""
        path = self._path(host)
        path.parent.mkdir(parents=True, exist_ok=True)
        if origin is None:
            origin = self.origin(host)
        temporary = path.with_name(f".tasks.{os.getpid()}.{threading.get_ident()}.tmp")
        document = {"seen_at": at or time.time(), "tasks": tasks, "origin": origin}
        temporary.write_text(json.dumps(document))
        os.replace(temporary, path)

    def origin(self, host: str) -> dict[str, Any] | None:
        """What the host's stream last said of its machine (its boot id, its tmux server's
        start), None when it never streamed."""
        try:
            kept = json.loads(self._path(host).read_text())
        except (OSError, ValueError):
            return None
        found = kept.get("origin") if isinstance(kept, dict) else None
        return found if isinstance(found, dict) else None

    def load(self, host: str) -> tuple[list[dict[str, Any]], float | None]:
        """The host's last answer and when it came; nothing (and None) when it never answered."""
        try:
            kept = json.loads(self._path(host).read_text())
        except (OSError, ValueError):
            return [], None
        tasks = kept.get("tasks") if isinstance(kept, dict) else None
        if not isinstance(tasks, list):
            return [], None
        seen = kept.get("seen_at")
        return [t for t in tasks if isinstance(t, dict)], (
            float(seen) if isinstance(seen, int | float) else None
        )
