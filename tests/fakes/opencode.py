"""A stand-in for opencode, as laneboard drives it (../shared/AGENTS.md sections 1-2).

CLI: `opencode.py [--port N] [-s SESSION]`. With `--port` it serves its events as server-sent
events at `GET http://127.0.0.1:N/event`, as `opencode --port` does: `session.status` with
`{"type": "busy"}` / `{"type": "idle"}` and `permission.asked`, each naming its `sessionID`. It
takes its prompt typed (no prompt argument). Conversations are kept in
`$HOME/.fake-opencode/<id>.log`; `-s ID` resumes one and says how many turns it holds.

Input lines: `work S` (busy S seconds), `ask` (a permission; the next line answers it),
`exit N`; anything else is a prompt answered at once.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CLIENTS: list[queue.Queue[str]] = []
LOCK = threading.Lock()


class Events(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/event":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        mine: queue.Queue[str] = queue.Queue()
        with LOCK:
            CLIENTS.append(mine)
        try:
            while True:
                self.wfile.write(mine.get().encode())
                self.wfile.flush()
        except OSError:
            pass

    def log_message(self, *args: object) -> None:
        pass


def emit(kind: str, **properties: object) -> None:
    line = "data: " + json.dumps({"type": kind, "properties": properties}) + "\n\n"
    with LOCK:
        for client in CLIENTS:
            client.put(line)


def main(argv: list[str]) -> int:
    port, session, resumed = None, f"ses_{uuid.uuid4().hex[:12]}", False
    while argv:
        arg = argv.pop(0)
        if arg == "--port":
            port = int(argv.pop(0))
        elif arg == "-s":
            session, resumed = argv.pop(0), True
        else:
            raise SystemExit(f"unknown argument {arg}")
    if port is not None:
        server = ThreadingHTTPServer(("127.0.0.1", port), Events)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    log = Path(os.environ["HOME"]) / ".fake-opencode" / f"{session}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"fake opencode (session {session})", flush=True)
    if resumed:
        turns = len(log.read_text().splitlines()) if log.exists() else 0
        print(f"resumed session with {turns} turns", flush=True)
    time.sleep(0.3)  # a reader connecting as it starts gets the first event
    emit("session.status", sessionID=session, status={"type": "idle"})
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            return 0
        command, _, rest = line.partition(" ")
        if command == "exit":
            return int(rest or 0)
        with log.open("a") as handle:
            handle.write(line + "\n")
        emit("session.status", sessionID=session, status={"type": "busy"})
        if command == "work":
            end = time.monotonic() + float(rest or 1)
            while time.monotonic() < end:
                print("\r\x1b[2KWorking... (esc to interrupt)", end="", flush=True)
                time.sleep(0.3)
        elif command == "ask":
            emit("permission.asked", sessionID=session, permission={"type": "bash"})
            print("Allow once? [y/n]", flush=True)
            sys.stdin.readline()
        print(f"\r\x1b[2Kdone: {line}", flush=True)
        emit("session.status", sessionID=session, status={"type": "idle"})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
