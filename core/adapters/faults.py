"""Named fault-injection points, so tests can kill or hold laneboard at each step of a
multi-step change.

`LANEBOARD_FAULT=<point>` makes the process SIGKILL itself when it reaches that point: no
`finally`, no atexit, exactly like a power cut or `kill -9`. Reconciliation (`laneboard doctor`)
must then find the interrupted change in the ledger and finish or undo it exactly.

`LANEBOARD_PAUSE=<point>:<dir>` makes it stop there instead, until told to go on: it writes the
point's name into the FIFO `<dir>/reached` and waits for a byte on the FIFO `<dir>/go` (the
first time only: a step that repeats goes on the second time). A test
uses it to act at an exact moment (retain during a discard, write a file just before removal)
without any sleep. Both do nothing unless the variable names this point.
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
    "provision.before_settle",
    "start.before_lock",
    "restore.after_apply",
    "discard.after_intent",
    "discard.after_quarantine",
    "discard.after_snapshot",
    "discard.before_remove",
    "discard.after_verify",
    "discard.after_detach",
    "discard.after_worktree_remove",
    "discard.before_branch_delete",
    "finalize.after_intent",
    "finalize.after_result",
    "finalize.after_scratch",
    "finalize.after_gate",
    "finalize.after_move",
    "finalize.after_anchor",
    "queue.after_intents",
    "queue.after_results",
    "queue.after_bisect",
    "queue.after_land",
    "publish.after_intent",
    "publish.after_push",
    "pause.after_stop",
    "retain.after_stop",
    "agent.before_handoff",
    "agent.after_handoff",
    "cancel.after_intent",
)
"""Every point the code declares; `checkpoint` refuses names not listed here (a typo in a test
would otherwise never fire and the test would pass vacuously)."""


PAUSE_ENV = "LANEBOARD_PAUSE"


def checkpoint(point: str) -> None:
    """Die here, uncleanly, or wait here, if the environment asks for it."""
    if point not in POINTS:
        raise ValueError(f"unknown fault point {point!r}")
    if os.environ.get(ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)
    paused, _, directory = os.environ.get(PAUSE_ENV, "").partition(":")
    if paused == point and directory:
        del os.environ[PAUSE_ENV]  # once: a step that repeats goes on the second time
        with open(os.path.join(directory, "reached"), "w") as reached:
            reached.write(point + "\n")
        with open(os.path.join(directory, "go"), "rb") as go:
            go.read(1)
