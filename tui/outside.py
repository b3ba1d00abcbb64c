"""Running a laneboard command outside the sandbox of a confined pane.

A confined agent cannot write the repository's metadata (`.git/worktrees`, the worktree area)
nor another task's worktree, so `laneboard new` (a child), `cancel`, `retry`, `discard`,
`restore`, `finalize` and `rebase` run from inside its pane would fail at git's first write
there. The tmux server the pane runs on is outside the sandbox (docs/confine.md: the
sandbox guards against mistakes; tmux stays reachable), so the command runs there: its argv,
working directory and environment (the pane's, minus the sandbox's marker and `git` guard) are
written to a run directory in the state dir, `tmux run-shell -b` starts this module on it, and
the caller streams its stdout and stderr back as they come and exits with its exit code.

Only laneboard itself runs there, with the arguments the caller gave, checked by the same
parser; Ctrl-C in the pane interrupts it (SIGINT is passed on, and provisioning rolls back).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

CONFINED_ENV = "LANEBOARD_CONFINED"
SOCKET_ENV = "LANEBOARD_OUTSIDE"
"""The tmux socket to run outside through, for a process that is not itself in a pane (the
MCP server an agent started: its client may pass it no `TMUX`); the server sets it from its
task's pane."""
START_WITHIN = 10.0
"""Seconds tmux has to start the command before the caller gives up."""
POLL = 0.05


def confined_here() -> bool:
    """This process runs inside a task's sandbox, in a tmux pane: the marker is set, the
    repository's root is read-only from here (the variable alone proves nothing), and there is
    a tmux server to run things outside. (A confined lane command outside tmux runs the command
    where it is, and git's own refusal says why it cannot.)"""
    root = os.environ.get("LANEBOARD_REPO")
    marked = os.environ.get(CONFINED_ENV) or os.environ.get(SOCKET_ENV)
    if not marked or not root or not _socket():
        return False
    return not os.access(root, os.W_OK)


def _socket() -> str | None:
    return os.environ.get("TMUX", "").split(",")[0] or os.environ.get(SOCKET_ENV) or None


def _state_dir() -> Path:
    from laneboard.core.service.app import Service

    return Service.state_root()


def _outside_env() -> dict[str, str]:
    """The pane's environment as it would be outside: no sandbox marker, no task identity (a
    parent is passed as `--parent`), and no PATH entry of laneboard's own state dir (the `git`
    guard and the lane shims)."""
    state = os.path.realpath(_state_dir())
    env = {
        key: value
        for key, value in os.environ.items()
        if key
        not in (
            CONFINED_ENV,
            SOCKET_ENV,
            "LANEBOARD_TASK",
            "LANEBOARD_TASK_NAME",
            "LANEBOARD_TASK_ID",
        )
    }
    kept = [
        entry
        for entry in env.get("PATH", os.defpath).split(os.pathsep)
        if entry and not os.path.realpath(entry).startswith(state + os.sep)
    ]
    env["PATH"] = os.pathsep.join(kept)
    # The command's agents run on the server it goes through, whatever this process was told.
    env.setdefault("LANEBOARD_TMUX_SOCKET", _socket() or "")
    return env


def run(argv: list[str], *, parent: str | None) -> int:
    """Run `laneboard argv` outside the sandbox and wait for it; its exit code."""
    socket = _socket()
    assert socket is not None  # confined_here() said so
    words = list(argv)
    given = words[: words.index("--")] if "--" in words else words
    if parent is not None and "--parent" not in given and "--no-parent" not in given:
        at = words.index("--") if "--" in words else len(words)
        words[at:at] = ["--parent", parent]  # options before a `--`, never after
    runs = _state_dir() / "outside"
    _sweep(runs)
    place = runs / f"{os.getpid()}-{time.monotonic_ns()}"
    place.mkdir(parents=True, mode=0o700)  # it holds the pane's environment
    (place / "run.json").touch(mode=0o600)
    (place / "run.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "laneboard.tui.cli", *words],
                "cwd": os.getcwd(),
                "env": _outside_env(),
            }
        )
    )
    for name in ("stdout", "stderr"):
        (place / name).touch()
    inner = shlex.join([sys.executable, "-m", "laneboard.tui.outside", str(place)])
    started = subprocess.run(
        ["tmux", "-S", socket, "run-shell", "-b", inner.replace("#", "##")],
        capture_output=True,
        check=False,
    )
    if started.returncode != 0:
        from laneboard.core.domain.errors import LaneboardError

        said = started.stderr.decode(errors="replace").strip()
        raise LaneboardError(f"could not run it outside the sandbox through tmux: {said}")
    code = _follow(place)
    # Only laneboard's own run files are in it (argv, output, exit code); kept when tmux could
    # not start the command, as the trace of why.
    shutil.rmtree(place, ignore_errors=True)
    return code


def _sweep(runs: Path) -> None:
    """Remove the run directories of callers that died (a caller removes its own when it
    ends). A live caller's directory stays however old it is (a long setup or gate); one whose
    pid was reused stays too, and is only a few small files."""
    try:
        entries = list(runs.iterdir())
    except FileNotFoundError:
        return
    for entry in entries:
        pid = entry.name.split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(entry, ignore_errors=True)


def _follow(place: Path) -> int:
    """Pass the outside command's output on as it comes; its exit code once it ends."""
    streams = [
        (open(place / "stdout", "rb"), sys.stdout.buffer),  # noqa: SIM115 (closed below)
        (open(place / "stderr", "rb"), sys.stderr.buffer),  # noqa: SIM115
    ]
    begun = time.monotonic()
    interrupted = False
    try:
        while True:
            for source, sink in streams:
                chunk = source.read()
                if chunk:
                    sink.write(chunk)
                    sink.flush()
            code = _read_int(place / "rc")
            if code is not None:
                for source, sink in streams:
                    sink.write(source.read())
                    sink.flush()
                return code
            pid = _read_int(place / "pid")
            if pid is None and time.monotonic() - begun > START_WITHIN:
                raise OSError("tmux did not start it")
            if pid is not None and not _alive(pid):
                time.sleep(POLL)
                if _read_int(place / "rc") is None:
                    raise OSError(f"the command outside (pid {pid}) ended without an exit code")
            try:
                time.sleep(POLL)
            except KeyboardInterrupt:
                if pid is not None and not interrupted:
                    interrupted = True
                    os.kill(pid, signal.SIGINT)  # it rolls back, then ends
                    continue
                raise
    finally:
        for source, _sink in streams:
            source.close()


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(place: str) -> int:
    """The outside half (started by tmux): run the command the run directory describes, its
    output into files there, then its exit code into `rc`."""
    where = Path(place)
    spec = json.loads((where / "run.json").read_text())
    (where / "run.json").unlink()  # the environment is not left lying about
    with open(where / "stdout", "ab") as out, open(where / "stderr", "ab") as err:
        proc = subprocess.Popen(
            spec["argv"],
            cwd=spec["cwd"],
            env=spec["env"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        (where / "pid.tmp").write_text(str(proc.pid))
        os.replace(where / "pid.tmp", where / "pid")
        code = proc.wait()
    try:
        (where / "rc.tmp").write_text(str(code if code >= 0 else 128 - code))
        os.replace(where / "rc.tmp", where / "rc")
    except OSError:
        return 1  # its caller is gone and its run directory was swept: no one to tell
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
