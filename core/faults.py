"""Named fault-injection points, so tests can kill laneboard at each step of a multi-step change.

`LANEBOARD_FAULT=<point>` makes the process SIGKILL itself when it reaches that point: no
`finally`, no atexit, exactly like a power cut or `kill -9`. Reconciliation (`laneboard doctor`)
must then find the interrupted change in the ledger and finish or undo it exactly.
"""

from __future__ import annotations

import os
import signal

ENV = "LANEBOARD_FAULT"

POINTS = (
    "provision.after_intent",
    "provision.after_branch",
    "provision.after_worktree_add",
    "provision.after_pin",
    "provision.after_copy",
    "provision.after_setup",
    "restore.after_apply",
    "discard.after_intent",
    "discard.after_quarantine",
    "discard.after_snapshot",
    "discard.before_remove",
    "discard.after_worktree_remove",
)
"""Every point the code declares; `checkpoint` refuses names not listed here (a typo in a test
would otherwise never fire and the test would pass vacuously)."""


def checkpoint(point: str) -> None:
    """Die here, uncleanly, if the environment asks for it."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}")
    if os.environ.get(ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
