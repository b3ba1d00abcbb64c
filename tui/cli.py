"""The `laneboard` command line: parse, call the application service, print, exit.

The parser (`tui.parser`) is built from the commands declared once in
`laneboard.core.service.commands`; each command's handler (`tui.commands`, one module per group)
calls the service opened at the composition root (`tui.root`) or, for `exec`, its lean entry
(`laneboard.core.service.lanes`), and prints values (`laneboard.tui.output`). This module is the
entry point: the lean path of `exec`, a command asked from inside a sandbox (sent through the
task's channel, or checked against what its caller may do), the board when run bare on a
terminal, and one line per refusal.

Exit codes: 0 success, 1 refused (the reason on stderr, one line per reason), 2 usage error,
75 gave up waiting for a lane; `exec` exits with its command's code. Bad input never produces a
traceback; set `LANEBOARD_DEBUG=1` to see one for an unexpected internal error.

Imports are made inside each handler: `laneboard exec` (run for every shimmed `cargo` or `make`)
loads neither the TUI stack nor pygit2, and pydantic only when a config file must be validated.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from laneboard.core.domain.channel import CALLER_ENV, refused
from laneboard.core.domain.errors import LaneboardError
from laneboard.tui.commands import handlers, hosts, lanes
from laneboard.tui.output import CONTROLS
from laneboard.tui.root import close_all, open_service

if TYPE_CHECKING:
    import argparse


class _Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a command that changes things: unwound like Ctrl-C, so that
    provisioning rolls back and leases are released before the process ends."""


CHANGES = frozenset(
    {
        "init",
        "new",
        "start",
        "pause",
        "resume",
        "retain",
        "discard",
        "restore",
        "doctor",
        "verify",
        "finalize",
        "rebase",
        "cancel",
        "retry",
    }
)
"""Commands during which SIGTERM and SIGHUP unwind like Ctrl-C (rollback, lease release)."""


FIRST_READ_WAIT = 0.75
"""Seconds the board waits for the feed's first full read before it starts Textual. Both in
one process contend for the interpreter lock, and the feed's read is thousands of small
system calls that each give the lock up and wait for it again: beside Textual's start-up
(0.35 s of Python) the read took 0.7 s instead of 0.45 s at 200 tasks, and every git state
was shown 1.2-1.3 s after launch; read first, then Textual, after 0.90-1.06 s (five launches
on a kept 200-task fixture; docs/board.md, "2026-12-07, later"). A read that takes longer (a
cold disk, thousands of tasks) goes on beside the UI, which shows the ledger's rows meanwhile."""


def _board(args: argparse.Namespace) -> int:
    """`laneboard` with no arguments on a terminal: the board."""
    from laneboard.core.domain.models import Actor
    from laneboard.tui.board.feed import Feed

    service = open_service()
    service.actor = Actor.TUI
    feed = Feed(service)
    feed.start()
    feed.first_read.wait(FIRST_READ_WAIT)
    try:
        from laneboard.tui.board.app import BoardApp

        here = None
        with contextlib.suppress(LaneboardError):
            here = service.repo(Path(args.repo or os.getcwd())).root
        app = BoardApp(service, here=here, feed=feed)
        service.on_notice = lambda line: app.call_from_thread(app.notify, line)
        app.run()
    finally:
        feed.stop()
        if feed.thread is not None:
            feed.thread.join(timeout=5)  # it resigns the controller's place on its way out
    return 0


RAW = frozenset({"exec", "attach", "mcp", "shell"})
"""Commands whose output is not laneboard's text: a command's own, a terminal's, a protocol."""


class _Printable:
    """stdout and stderr as laneboard prints its text: a terminal control character in what an
    agent wrote (a commit subject, a message, a file name) is shown as `?`, never obeyed by the
    operator's terminal (an escape that sets its clipboard, clears its screen, retitles it).
    JSON escapes them already."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return int(self.stream.write(text.translate(CONTROLS)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def _printable() -> Any:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(sys.stdout), _Printable(sys.stderr)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def _inside() -> str | None:
    from laneboard.core.service import inside

    return inside.channel()


def _through_channel(channel: str, args: argparse.Namespace, words: list[str]) -> int:
    """Inside a task's sandbox: `exec` and `mcp` run here (a lane command in the sandbox it is
    in, its lane held through the channel; the MCP server's tools are commands that go through
    the channel); everything else is asked of laneboard outside, which runs it scoped to the
    task's subtree or refuses it with one line."""
    from laneboard.core.service import inside

    if args.subcommand is None:
        name = os.environ.get("LANEBOARD_TASK_NAME") or os.environ.get("LANEBOARD_LANE") or "a"
        raise LaneboardError(refused(None, name) or "")
    if args.command in ("exec", "mcp"):
        return int(args.handler(args))
    return inside.run(channel, words)


def _check_caller(args: argparse.Namespace, caller_id: str) -> None:
    """A command run for a confined task through its channel (`CALLER_ENV`) does only what
    `core.domain.channel.ALLOWED` lists, on tasks within the caller's reach, in the caller's
    own repository; anything else is refused with one line, before anything changes."""
    from laneboard.core.domain.channel import ALLOWED, Reach, flag_refusal, out_of_reach

    service = open_service()
    caller = service.task_by_id(caller_id)
    command = args.command if args.subcommand is not None else None
    why = refused(command, caller.name)
    if why is not None:
        raise LaneboardError(why)
    assert command is not None
    rule = ALLOWED[command]
    for dest in rule.refused:
        if getattr(args, dest, None):
            raise LaneboardError(flag_refusal(command, dest, caller.name))
    if getattr(args, "repo", None) and service.repo(Path(args.repo)).id != caller.repo_id:
        raise LaneboardError(
            f"--repo {args.repo} is not {caller.name}'s repository: refused from its sandbox"
        )
    for dest in rule.names:
        given = getattr(args, dest, None)
        for ref in given if isinstance(given, list) else [given] if given else []:
            task = service.resolve(caller.repo_id, ref)
            inside = service.within(caller, task)
            if rule.reach is Reach.SELF:
                inside = task.id == caller.id
            elif rule.reach is Reach.BELOW:
                inside = inside and task.id != caller.id
            if not inside:
                raise LaneboardError(out_of_reach(rule.reach, caller.name, ref))
    if command == "ls" and not args.children:
        args.children = caller.id
    args.repo = getattr(args, "repo", None) or service.repo(caller.repo_id).root


def _unwind_on_hangup() -> None:
    def interrupted(signum: int, frame: object) -> None:
        raise _Interrupted(signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupted)


def _exec_fast(argv: Sequence[str]) -> SimpleNamespace | None:
    """`exec`'s arguments read without building the whole parser (every shimmed `cargo` pays
    for this start), or None when they need argparse (help, a mistake: it says what is wrong)."""
    words = list(argv)
    repo = None
    if words[:1] == ["--repo"] and len(words) > 1:
        repo, words = words[1], words[2:]
    if words[:1] != ["exec"]:
        return None
    found: dict[str, Any] = {"lane": None, "root": False, "timeout": None, "quiet": False}
    rest = words[1:]
    while rest and rest[0] != "--":
        word = rest.pop(0)
        if word in ("--root", "--quiet"):
            found[word[2:]] = True
        elif word in ("--lane", "--timeout", "--repo") and rest and rest[0] != "--":
            value = rest.pop(0)
            if word == "--timeout":
                try:
                    found["timeout"] = float(value)
                except ValueError:
                    return None
            else:
                found[word[2:]] = value
        else:
            return None
    if not rest or (found["lane"] is None) == (not found["root"]):
        return None
    found.setdefault("repo", repo)
    return SimpleNamespace(argv=rest, handler=lanes.cmd_exec, command="exec", **found)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `laneboard` console script (`argv` None: this process's command
    line, which then ends here once nothing is left to do, `_end`)."""
    code = _main(argv)
    if argv is None:
        _end(code)
    return code


def _end(code: int) -> None:
    """End the process now, with `code`, when Python's teardown would only free memory: no
    other thread runs and nothing waits to run at exit (`atexit`), and the output is flushed.
    Freeing every object one by one costs a tenth of a short command (`ls`, `show`, a hook);
    the ledger is closed already (`close_all`). Otherwise the caller exits the usual way."""
    import atexit

    threading = sys.modules.get("threading")
    if atexit._ncallbacks() or (threading is not None and threading.active_count() > 1):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # the usual exit says what it says of a stream that cannot be flushed
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    for stream in (sys.stdout, sys.stderr):
        # Paths may hold any bytes: print them as the bytes they are, never fail on them.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    try:
        words = sys.argv[1:] if argv is None else argv
        caller = os.environ.get(CALLER_ENV)
        # A caller of a channel never takes the lean path: its command is parsed and checked.
        fast = None if caller else _exec_fast(words)
        if fast is not None:
            return int(fast.handler(fast))
        from laneboard.tui.parser import build

        args = build(handlers(), words).parse_args(words)
        channel = _inside()
        host = hosts.remote(args)
        if host is not None:
            if channel is not None or caller:
                raise LaneboardError(f"commands on host {host} are refused from a task's sandbox")
            return hosts.forward(host, args, words)
        if channel is not None:
            return _through_channel(channel, args, list(words))
        if caller:
            _check_caller(args, caller)
        if args.subcommand is None:
            if sys.stdin.isatty() and sys.stdout.isatty():
                return _board(args)
            build(handlers()).print_help()
            return 0
        if args.command in CHANGES and argv is None:  # not when called inside a test process
            _unwind_on_hangup()
        if args.command in RAW:
            return int(args.handler(args))
        with _printable():
            return int(args.handler(args))
    except LaneboardError as err:
        print(f"laneboard: {err}", file=sys.stderr)
        for detail in err.details:
            print(f"  {detail}", file=sys.stderr)
        return err.exit_code
    except BrokenPipeError:  # the reader went away (`laneboard ls | head`): not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(
            "laneboard: interrupted (`laneboard doctor` shows anything left half-done)",
            file=sys.stderr,
        )
        return 130
    except Exception as err:  # the last line of defence against a traceback
        if os.environ.get("LANEBOARD_DEBUG"):
            raise
        print(f"laneboard: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        print("  (set LANEBOARD_DEBUG=1 to see the traceback)", file=sys.stderr)
        return 1
    finally:
        close_all()


if __name__ == "__main__":
    sys.exit(main())
