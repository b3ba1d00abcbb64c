"""A fake coding agent: prints like one, waits for input, exits with the code it is told.

Protocol (one command per line on stdin):
  `exit N`    exit with code N
  `say TEXT`  print TEXT
  anything else is echoed back as `heard: ...`
It prints `ready` (with its cwd and lane environment) once it runs, and on SIGTERM, SIGINT,
SIGHUP or SIGQUIT prints `got <SIGNAME>` and exits with 100 + the signal number, so a test can
see that a signal reached it and that its exit code came back.
"""

from __future__ import annotations

import os
import signal
import sys


def _on_signal(signum: int, frame: object) -> None:
    print(f"got {signal.Signals(signum).name}", flush=True)
    sys.exit(100 + signum)


def main() -> int:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, _on_signal)
    lease = os.environ.get("LANEBOARD_LEASE", "-")
    print(f"ready cwd={os.getcwd()} lease={lease}", flush=True)
    for line in sys.stdin:
        command, _, rest = line.strip().partition(" ")
        if command == "exit":
            return int(rest or 0)
        if command == "say":
            print(rest, flush=True)
        else:
            print(f"heard: {line.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
