"""Reads an agent's server-sent event stream into the task's event file (opencode).

opencode cannot run a hook command, but `opencode --port N` serves its events at
`GET http://127.0.0.1:N/event` (../shared/AGENTS.md section 1). The pane's wrapper starts this
module in the background beside the agent (`python -P -m laneboard.core.adapters.eventstream`,
with `LANEBOARD_EVENT_STREAM` the URL and `LANEBOARD_EVENTS` the file); it appends the same
lines `hooks/event.sh` writes: `session.status` busy → `working`, idle → `idle`,
`permission.asked`/`permission.updated` → `waiting`, each with the session id the event names.

One long-lived process per agent (not one per event). It retries the connection while the
agent's server starts (up to `CONNECT_FOR` seconds), and each try gives up after
`ANSWER_WITHIN` seconds without an answer: opencode accepts a connection while it starts and
never answers that one (3 of 3 with opencode 1.18.33). It ends when the stream ends (the agent
exited) or its pane's session is killed with it.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

CONNECT_FOR = 60.0
"""How long the reader keeps trying to reach the agent's event stream."""
ANSWER_WITHIN = 2.0
"""How long one try waits for the connection and the response's headers."""
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


def connect(url: str, *, connect_for: float = CONNECT_FOR) -> Iterator[bytes] | None:
    """The stream's lines, once a try got the response's headers within `ANSWER_WITHIN`
    seconds; None when no try did within `connect_for`. Once it answers, the stream may stay
    silent for as long as the agent is (no timeout)."""
    parts = urllib.parse.urlsplit(url)
    deadline = time.monotonic() + connect_for
    while True:
        connection = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port, timeout=ANSWER_WITHIN
        )
        try:
            connection.request("GET", parts.path or "/", headers={"Accept": "text/event-stream"})
            sock = connection.sock  # the response takes it over (a stream has no length)
            response = connection.getresponse()
            if response.status == 200 and sock is not None:
                sock.settimeout(None)
                return iter(response)
            connection.close()
        except OSError:  # refused, reset, or no answer in time
            connection.close()
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)


def follow(url: str, events: str) -> int:
    stream = connect(url)
    if stream is None:
        return 1
    with open(events, "a") as sink:
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
