"""Follow `laneboard new x --no-start` through laneboard's core modules (run by hand; the figures
are in the note of the operations refactor).

    .venv/bin/python bench/trace_new.py laneboard.core.operations.provision \\
        laneboard.core.operations.steps.creation

Counts, with a profile hook, every call from one core module into another: calls between two
operations (none since operations/ was cut into operations and shared steps), calls that climb
back to a higher layer, how often the ledger is entered, and how often each named module is
entered. Runs in a throwaway HOME, git config and LANEBOARD_HOME.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any


def layer(module: str) -> int:
    for rank, part in enumerate((".service", ".operations", ".adapters")):
        if part in module:
            return rank
    return 3


def is_operation(module: str) -> bool:
    return module.startswith("laneboard.core.operations.") and ".steps." not in module


def main() -> None:
    tmp = Path(tempfile.mkdtemp())
    os.environ.update(
        HOME=str(tmp),
        LANEBOARD_HOME=str(tmp / "lb"),
        GIT_CONFIG_GLOBAL=str(tmp / "gitconfig"),
        GIT_CONFIG_NOSYSTEM="1",
    )
    (tmp / "gitconfig").write_text(
        "[user]\n name = t\n email = t@t\n[init]\n defaultBranch = main\n"
    )
    repo = tmp / "r"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    (repo / "README.md").write_text("x\n")
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "i"], cwd=repo, check=True)
    os.chdir(repo)
    from laneboard.tui.cli import main as laneboard

    laneboard(["init"])
    stays: list[str] = []
    edges: list[tuple[str, str]] = []

    def seen(frame: FrameType, event: str, _arg: Any) -> None:
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("laneboard.core") or module.endswith("domain.values"):
            return
        if not stays or stays[-1] != module:
            stays.append(module)
        back = frame.f_back
        caller = back.f_globals.get("__name__", "") if back else ""
        if caller.startswith("laneboard.core") and caller != module:
            edges.append((caller, module))

    sys.setprofile(seen)
    code = laneboard(["new", "x", "--no-start"])
    sys.setprofile(None)
    assert code == 0, code
    climbs = sum(1 for a, b in edges if layer(b) < layer(a))
    between = sum(1 for a, b in edges if is_operation(a) and is_operation(b))
    print(f"operation -> operation calls: {between}")
    print(f"module-to-module calls: {len(edges)}; climbs back to a higher layer: {climbs}")
    ledger = stays.count("laneboard.core.adapters.ledger")
    print(f"stays {len(stays)} in {len(set(stays))} modules; the ledger entered {ledger} times")
    for name in sys.argv[1:]:
        print(f"{name}: entered {stays.count(name)} times")


if __name__ == "__main__":
    main()
