"""The composition root: the one place that builds the application service with its runtime
(tmux on laneboard's socket) and its notice printer. The command line, the board and the MCP
server all open their service here; `close_all` ends the connections a process opened."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from laneboard.core.service.app import Service
    from laneboard.sessions.tmux import TmuxRuntime

_OPENED: list[Service] = []
"""Services this process opened; `close_all` closes their connections."""


def open_service() -> Service:
    """A service whose runtime (tmux) is made on first use; its notices go to stderr."""
    from laneboard.core.service.app import Service

    def runtime() -> TmuxRuntime:
        from laneboard.sessions.tmux import TmuxRuntime

        return TmuxRuntime(Service.tmux_socket())

    service = Service(
        runtime=runtime, on_notice=lambda line: print(f"laneboard: {line}", file=sys.stderr)
    )
    _OPENED.append(service)
    return service


def close_all() -> None:
    """Close every service this process opened (a command's end)."""
    while _OPENED:
        _OPENED.pop().close()
