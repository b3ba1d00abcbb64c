"""The service's lean entry for a `laneboard` that runs inside a task's sandbox: everything it
asks goes through the task's channel (DESIGN.md section 5a), and nothing here opens the ledger,
which a sandbox does not see.
"""

from __future__ import annotations

from typing import Any


def channel() -> str | None:
    """The channel's socket when this process runs in a task's sandbox, else None."""
    from laneboard.core.adapters.sandboxed import inside

    return inside()


def run(path: str, argv: list[str]) -> int:
    """`laneboard ARGV` run outside for the caller (scoped to its subtree there); its output
    passed on, its exit code returned."""
    from laneboard.core.adapters.channel import run as run_outside

    return run_outside(path, argv)


def whoami(path: str) -> dict[str, Any]:
    """The caller's own task (`task`: its id, `name`)."""
    from laneboard.core.adapters.channel import whoami as ask

    return ask(path)
