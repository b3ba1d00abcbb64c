"""What every command handler shares: where a command runs, how it reports a changed task, and
the lines printed while it waits for a lane or runs a setup command."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import argparse

    from laneboard.core.domain.lanes import Lease
    from laneboard.core.domain.views import Outcome


T = TypeVar("T")


def repo_arg(args: argparse.Namespace) -> Path:
    return Path(args.repo or os.getcwd())


def here_or_all(
    args: argparse.Namespace, call: Callable[[Path | None], T]
) -> tuple[Path | None, T]:
    """`call` on `--repo` or the cwd's repository; on every registered repo (None) when the
    cwd is in no repository and `--repo` is absent. Returns what was asked and the answer."""
    from laneboard.core.service.app import NotARepository

    if args.repo:
        return Path(args.repo), call(Path(args.repo))
    here = Path.cwd()
    try:
        return here, call(here)
    except NotARepository:
        return None, call(None)


def report(args: argparse.Namespace, done: Outcome, line: str, **extra: object) -> int:
    """The outcome of a command that changed one task: its JSON document, or one line."""
    from laneboard.core.domain.views import TaskView
    from laneboard.tui import output

    if args.json:
        output.emit_json(output.task_document(TaskView(done.task, done.repo), **extra))
    else:
        print(f"{done.task.name}: {line}")
    return 0


def print_wait(lease: Lease) -> None:
    """The one line a command prints when it has to wait for its lane."""
    lane = "the root lane" if lease.lane is None else "its lane"
    print(f"laneboard: waiting for {lane}: {lease.wait_reason}", file=sys.stderr, flush=True)


def print_output(chunk: bytes) -> None:
    """A setup command's output, passed through as it comes (to stderr: stdout is the result)."""
    stream = getattr(sys.stderr, "buffer", None)
    if stream is not None:
        stream.write(chunk)
    else:
        sys.stderr.write(chunk.decode(errors="replace"))
    sys.stderr.flush()


def print_notes(done: Outcome) -> None:
    for note in done.notes:
        print(f"laneboard: {note}", file=sys.stderr)


def print_note(line: str) -> None:
    print(f"laneboard: {line}", file=sys.stderr, flush=True)


def page(text: str) -> None:
    """Print `text`, through the pager when stdout is a terminal (a large diff pages)."""
    import shlex
    import subprocess

    if not sys.stdout.isatty():
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
        return
    pager = shlex.split(os.environ.get("PAGER") or "less -R -F -X")
    try:
        subprocess.run(pager, input=text.encode(errors="surrogateescape"), check=False)
    except OSError:
        sys.stdout.write(text + "\n")


STOPPING = "waiting for its agent to quit (SIGTERM sent; it is killed after agents.stop_grace)"
"""What retain and pause say while an agent takes its time to quit."""


@contextlib.contextmanager
def said_if_slow(line: str, after: float = 1.0) -> Iterator[None]:
    """Print `line` (to stderr) if what runs inside takes longer than `after` seconds: an
    agent that ignores SIGTERM keeps retain and pause waiting for the whole stop grace, and
    the operator hears what it waits for instead of nothing."""
    timer = threading.Timer(after, lambda: print(f"laneboard: {line}", file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
