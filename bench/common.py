"""What the benchmarks share: timing one command that must succeed."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def timed(
    args: list[str], cwd: Path, env: dict[str, str], *, stdin: str | None = None, sync: bool = False
) -> float:
    """Seconds `args` takes (it must exit 0). `sync` flushes what earlier steps left to write
    first: on this disk the write-back of one step's 300 MB otherwise lands in the next step."""
    if sync:
        os.sync()
    began = time.perf_counter()
    result = subprocess.run(
        args, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, check=False
    )
    took = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {result.stderr}")
    return took


def isolated_env(base: Path, root: Path) -> dict[str, str]:
    """The environment of a benchmark's laneboard and git processes: `HOME`, `LANEBOARD_HOME`
    and git's config under `base`, a fixed identity, this checkout on `PYTHONPATH`, and
    bytecode kept (as a user's install keeps it)."""
    env = {**os.environ, "HOME": str(base), "LANEBOARD_HOME": str(base / "lbhome")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=str(base / "gitconfig"),
        GIT_AUTHOR_NAME="b",
        GIT_AUTHOR_EMAIL="b@b",
        GIT_COMMITTER_NAME="b",
        GIT_COMMITTER_EMAIL="b@b",
        PYTHONPATH=str(root),
    )
    return env
