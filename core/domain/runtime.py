"""The runtime port: what core needs from the agent runtime (tmux), as a Protocol.

`sessions` implements it with libtmux; the composition root (CLI entry, app factory) wires the
real adapter. Until an adapter is wired, `NoRuntime` stands in: there are no panes, so there is no
agent to stop and no pane process to report.
"""

from __future__ import annotations

from typing import Protocol

from laneboard.core.domain.models import Task


class Runtime(Protocol):
    def pane_processes(self, task: Task) -> list[str]:
        """Live processes of the task's pane (`pid N (claude)`); empty when none run."""
        ...

    def stop(self, task: Task) -> None:
        """Stop the task's agent and wait until its processes have exited. Idempotent."""
        ...


class NoRuntime:
    """No agent runtime: no panes exist."""

    def pane_processes(self, task: Task) -> list[str]:
        return []

    def stop(self, task: Task) -> None:
        return None
