"""Whether this process runs inside a task's sandbox, and where its channel is: the one thing
every `laneboard` asks first, kept apart from the channel itself (sockets, processes) so that
a command outside any sandbox pays only for a few `stat`s."""

from __future__ import annotations

import os

from laneboard.core.domain.confine import CHANNEL_DIR, CHANNEL_ENV, CHANNEL_SOCKET


def inside() -> str | None:
    """The channel's socket when this process runs inside a task's sandbox, else None: named by
    `$LANEBOARD_CHANNEL`, or found where every sandbox has it (for a process its parent gave a
    bare environment, such as an MCP server), provided it is the user's own."""
    named = os.environ.get(CHANNEL_ENV)
    candidates = [named] if named else []
    candidates.append(os.path.join(CHANNEL_DIR, CHANNEL_SOCKET))
    for path in candidates:
        try:
            info = os.stat(os.path.dirname(path))
        except OSError:
            continue
        if info.st_uid == os.getuid() and not info.st_mode & 0o022 and os.path.exists(path):
            return path
    return None
