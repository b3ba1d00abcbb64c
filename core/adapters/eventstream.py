"""Reads an agent's server-sent event stream into the task's event file (opencode).

opencode cannot run a hook command, but `opencode --port N` serves its events at
`GET http://127.0.0.1:N/event` (../shared/AGENTS.md section 1). The pane's wrapper starts this
module in the background beside the agent (`python -P -m laneboard.core.adapters.eventstream`,
with `LANEBOARD_EVENT_STREAM` the URL and `LANEBOARD_EVENTS` the file); it appends the same
lines `hooks/event.sh` writes: `session.status` busy → `working`, idle → `idle`,
`permission.asked`/`permission.updated` → `waiting`, each with the session id the event names.

One long-lived process per agent (not one per event). It retries the connection while the
agent's server starts (up to `CONNECT_FOR` seconds) and ends when the stream ends (the agent
exited) or its pane's session is killed with it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

CONNECT_FOR = 60.0
STATES = {"busy": "working", "idle": "idle", "retry": "working"}


def line_for(event: dict[str, Any]) -> str | None:
    """The event-file line for one stream event, or None when it says nothing of the state."""
    kind = event.get("type")
    props = event.get("properties") or {}
    session = props.get("sessionID") or (props.get("info") or {}).get("id") or "-"
    if kind == "session.status":
        status = props.get("status")
        name = status.get("type") if isinstance(status, dict) else status
        state = STATES.get(str(name))
        return f"{state}\t{session}\t-\n" if state else None
    if kind == "session.idle":
        return f"idle\t{session}\t-\n"
    if kind in ("permission.asked", "permission.updated"):
        return f"waiting\t{session}\tpermission\n"
    return None


def follow(url: str, events: str) -> int:
    deadline = time.monotonic() + CONNECT_FOR
    while True:
        try:
            stream = urllib.request.urlopen(url, timeout=None)
            break
        except (urllib.error.URLError, OSError):
            if time.monotonic() > deadline:
                return 1
            time.sleep(0.2)
    with stream, open(events, "a") as sink:
        for raw in stream:
            text = raw.decode(errors="replace").strip()
            if not text.startswith("data:"):
                continue
            try:
                event = json.loads(text[5:])
            except ValueError:
                continue
            line = line_for(event) if isinstance(event, dict) else None
            if line is not None:
                sink.write(line)
                sink.flush()
    return 0


if __name__ == "__main__":
    url, events = os.environ.get("LANEBOARD_EVENT_STREAM"), os.environ.get("LANEBOARD_EVENTS")
    sys.exit(follow(url, events) if url and events else 2)
