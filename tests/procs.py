"""Driving real laneboard processes from tests: start, read lines with a deadline, stop.

Reads wait on the process's own output (an event), never on wall time: a deadline only turns a
hang into a clear failure.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import REPO_ROOT

AGENT = str(REPO_ROOT / "tests" / "fakes" / "agent.py")
DEADLINE = 90.0
"""Seconds a test waits for a process it started: generous, for a loaded machine (a wait
that succeeds returns at once)."""
LANEBOARD = [sys.executable, "-P", "-m", "laneboard"]
"""A real laneboard process, run from this checkout (`-P`: never from the test's cwd)."""


def laneboard_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The test's (isolated) environment for a laneboard process, plus `env`."""
    return {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}


def started(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """`laneboard ARGS` running in the background, its output captured as text."""
    return subprocess.Popen(
        [*LANEBOARD, *args],
        cwd=cwd,
        env=laneboard_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class Spawned:
    """A laneboard process with piped stdin, stdout and stderr."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [*LANEBOARD, *args],
            cwd=cwd,
            env=laneboard_env(env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._buffers = {"out": b"", "err": b""}
        self.seen = {"out": "", "err": ""}

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, pattern: str, stream: str = "out", deadline: float = DEADLINE) -> str:
        """Block until a line of `stream` matches `pattern`; return that line."""
        pipe = self.proc.stdout if stream == "out" else self.proc.stderr
        assert pipe is not None
        regex = re.compile(pattern)
        end = time.monotonic() + deadline
        with selectors.DefaultSelector() as sel:
            sel.register(pipe, selectors.EVENT_READ)
            while True:
                while b"\n" in self._buffers[stream]:
                    raw, self._buffers[stream] = self._buffers[stream].split(b"\n", 1)
                    line = raw.decode(errors="replace")
                    self.seen[stream] += line + "\n"
                    if regex.search(line):
                        return line
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"no line matching {pattern!r} on std{stream} of {self.args}; "
                        f"saw:\n{self.seen[stream]}"
                    )
                if sel.select(remaining):
                    chunk = os.read(pipe.fileno(), 65536)
                    if not chunk:
                        raise AssertionError(
                            f"std{stream} of {self.args} closed before {pattern!r}; "
                            f"saw:\n{self.seen[stream]}{self._buffers[stream].decode()}"
                        )
                    self._buffers[stream] += chunk

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((line + "\n").encode())
        self.proc.stdin.flush()

    def signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def wait(self, deadline: float = DEADLINE) -> int:
        return self.proc.wait(timeout=deadline)

    def kill_group(self) -> None:
        """SIGKILL the process and everything it started (its own session)."""
        os.killpg(self.proc.pid, signal.SIGKILL)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def exec_agent(
    lane: str | None, cwd: Path, *extra: str, env: dict[str, str] | None = None
) -> Spawned:
    """`laneboard exec --lane LANE -- <fake agent>` (`--root` when lane is None)."""
    where = ["--root"] if lane is None else ["--lane", lane]
    return Spawned(["exec", *where, *extra, "--", sys.executable, AGENT], cwd, env)


class Pause:
    """Holds a laneboard process at one checkpoint (`LANEBOARD_PAUSE`): `env` goes to the
    process, `reached()` blocks until it is there, `go()` lets it continue. The FIFOs are held
    open read-write here, so the process never blocks on opening them, and it sees EOF (and
    goes on) if the test dies."""

    def __init__(self, directory: Path, point: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.point = point
        self._fds = {}
        for name in ("reached", "go"):
            os.mkfifo(directory / name)
            self._fds[name] = os.open(directory / name, os.O_RDWR | os.O_NONBLOCK)
        self.env = {"LANEBOARD_PAUSE": f"{point}:{directory}"}

    def reached(self, deadline: float = DEADLINE) -> None:
        ready, _, _ = select.select([self._fds["reached"]], [], [], deadline)
        if not ready:
            raise AssertionError(f"the process never reached {self.point} in {deadline}s")
        assert os.read(self._fds["reached"], 4096).decode().strip() == self.point

    def go(self) -> None:
        os.write(self._fds["go"], b"!")

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
