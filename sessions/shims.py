"""Lane command shims: a per-task bin directory whose entries run the real command through the
task's lane (`laneboard exec --lane <task> -- <command>`).

The runtime prepends the directory to the agent pane's PATH, so the heavy commands an agent runs
(`cargo`, `make`, `pytest` …, config `lanes.wrap`) queue for their lane like any `laneboard exec`.
Every shim carries a marker line; `laneboard exec` skips marked files when it looks the real
command up, so it finds the real one even in a directory that also holds another task's shims, and
a shim never calls itself. Inside a running lease, nested shims run directly under it.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from laneboard.core.domain.errors import LaneboardError
from laneboard.core.domain.lanes import SHIM_MARKER


def shim_script(command: str, task_id: str, task_name: str, root: Path) -> str:
    """The shell script that runs `command` through the lane of `task_id`."""
    # -P: never put the current directory on sys.path: the worktree may hold a package of its
    # own named `laneboard` (laneboard's own repository does).
    laneboard = [sys.executable, "-P", "-m", "laneboard"]
    argv = [*laneboard, "exec", "--quiet", "--repo", str(root), "--lane", task_id, "--", command]
    return (
        "#!/bin/sh\n"
        f"{SHIM_MARKER.decode()}: task {task_name} ({task_id}), command {command}\n"
        f'exec {shlex.join(argv)} "$@"\n'
    )


def write_shims(
    task_id: str, task_name: str, root: Path, commands: list[str], directory: Path
) -> Path:
    """(Re)write the task's shims in `directory` (the service says where: under the state dir,
    never inside the worktree) for exactly `commands`; shims for commands no longer wrapped are
    removed (only files carrying the marker: nothing else in the directory is touched). Each file
    is replaced atomically, so a command starting meanwhile never sees half a shim."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = set(commands)
    for name in wanted:
        if not name or "/" in name or name.startswith("."):
            raise LaneboardError(f"cannot shim {name!r}: not a plain command name")
    for existing in directory.iterdir():
        if existing.name not in wanted and _is_shim(existing):
            existing.unlink()
    for name in sorted(wanted):
        target = directory / name
        temporary = directory / f".{name}.tmp"
        temporary.write_text(shim_script(name, task_id, task_name, root))
        os.chmod(temporary, 0o755)
        os.replace(temporary, target)
    return directory


def _is_shim(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return SHIM_MARKER in handle.read(256)
    except OSError:
        return False
