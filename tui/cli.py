"""The `laneboard` command line: parse, call the application service, print, exit.

Exit codes: 0 success, 1 refused (the reason on stderr, one line per reason), 2 usage error,
75 gave up waiting for a lane; `exec` exits with its command's code. Bad input never produces a
traceback; set `LANEBOARD_DEBUG=1` to see one for an unexpected internal error.

Imports are made inside each command: `laneboard exec` (run for every shimmed `cargo` or `make`)
loads neither the TUI stack nor pygit2, and pydantic only when a config file must be validated.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from laneboard.core.domain.errors import LaneboardError, UsageError

if TYPE_CHECKING:
    from laneboard.core.adapters.repo import RepoContext
    from laneboard.core.domain.lanes import Lease
    from laneboard.core.domain.models import Task
    from laneboard.core.service.app import Board


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _start(args: argparse.Namespace) -> Path:
    return Path(args.repo or os.getcwd())


_OPENED: list[Board] = []
"""Boards this invocation opened; `main` closes their ledgers when the command ends."""


def _board() -> Board:
    from laneboard.core.adapters.ledger import Ledger
    from laneboard.core.service.app import Board

    board = Board(Ledger.open_default())
    _OPENED.append(board)
    return board


def _repo(board: Board, args: argparse.Namespace, *, register: bool = False) -> RepoContext:
    ctx = board.repo(_start(args), register=register)
    if ctx.relocation is not None:
        for line in ctx.relocation.lines():
            print(f"laneboard: {line}", file=sys.stderr)
    return ctx


def _repo_or_none(board: Board, args: argparse.Namespace) -> RepoContext | None:
    """The repo of `--repo` or the cwd; None when the cwd is in no repo and `--repo` is absent
    (the command then covers every registered repo)."""
    from laneboard.core.adapters.git import NotARepository

    if args.repo:
        return _repo(board, args)
    try:
        return _repo(board, args)
    except NotARepository:
        return None


def cmd_init(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    board = _board()
    ctx, created = board.init(Path(args.path or args.repo or os.getcwd()))
    if ctx.relocation is not None:
        for line in ctx.relocation.lines():
            print(f"laneboard: {line}", file=sys.stderr)
    if args.json:
        output.emit_json(
            {"repo": str(ctx.root), "common_dir": str(ctx.common_dir), "registered": created}
        )
    else:
        print(f"{'registered' if created else 'already registered'}: {ctx.root}")
    return 0


def cmd_new(args: argparse.Namespace) -> int:

    if not args.no_start:
        raise UsageError("starting an agent is not available yet; pass --no-start")
    board = _board()
    task, ctx = board.new(
        _start(args), args.name, base=args.base, on_wait=_print_wait, on_output=_print_output
    )
    return _report(args, task, ctx, f"{task.state.value} at {task.worktree_path} on {task.branch}")


def _report(args: argparse.Namespace, task: Task, ctx: RepoContext, line: str) -> int:
    """The outcome of a command that changed one task: its JSON document, or one line."""
    from laneboard.tui import output

    if args.json:
        output.emit_json(output.task_json(task, ctx.repo))
    else:
        print(f"{task.name}: {line}")
    return 0


def cmd_ls(args: argparse.Namespace) -> int:
    from laneboard.core.adapters.repo import NotRegistered
    from laneboard.tui import output

    board = _board()
    try:
        ctx = _repo_or_none(board, args)
    except NotRegistered as err:
        # Listing an unregistered repo is not an error: it simply has no tasks yet.
        if args.json:
            output.emit_json([])
        else:
            print(f"no tasks: {err}")
        return 0
    views = board.tasks(ctx, include_retired=args.all)
    if args.json:
        output.emit_json([output.task_json(v.task, v.repo) for v in views])
        return 0
    if not views:
        print("no tasks" if ctx is None else f"no tasks in {ctx.root}")
        return 0
    rows = [
        [v.task.name, v.task.state.value, v.task.branch, v.task.worktree_path]
        + ([] if ctx else [v.repo.root])
        for v in views
    ]
    headers = ["NAME", "STATE", "BRANCH", "WORKTREE"] + ([] if ctx else ["REPO"])
    print(output.table(rows, headers))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    import json

    from laneboard.tui import output

    board = _board()
    ctx = _repo(board, args)
    task, verdict = board.verify(ctx, args.name)
    document = output.task_json(task, ctx.repo)
    document["verification"] = output.verdict_json(task, verdict)
    if args.json:
        output.emit_json(document)
        return 0
    for key, value in document.items():
        if key == "verification":
            value = str(verdict) if task.live else "(retired)"
        elif isinstance(value, dict):
            value = json.dumps(value)
        print(f"{key + ':':<26}{'' if value is None else value}")
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    import json

    from laneboard.tui import output

    board = _board()
    ctx = _repo(board, args)
    task, events = board.log(ctx, args.name)
    if args.json:
        document = output.task_json(task, ctx.repo)
        document["events"] = [output.event_json(e) for e in events]
        output.emit_json(document)
        return 0
    print(f"{task.name} ({task.id}): {task.state.value}")
    for event in events:
        data = json.dumps(event.data, sort_keys=True) if event.data else ""
        print(f"{output.iso(event.at)}  {event.actor.value:<6} {event.kind:<22} {data}".rstrip())
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    board = _board()
    ctx = _repo(board, args)
    task, verdict = board.verify(ctx, args.name, repin=args.repin)
    if args.json:
        output.emit_json(output.verdict_json(task, verdict))
    elif verdict.ok:
        print(f"ok: {task.worktree_path}")
    else:
        print(f"rejected: {verdict}", file=sys.stderr)
    return 0 if verdict.ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    board = _board()
    ctx = _repo_or_none(board, args)
    report = board.doctor(ctx, fix=args.fix)
    findings = [(repo, f) for repo, found in report for f in found]
    if args.json:
        output.emit_json([output.finding_json(repo, f) for repo, f in findings])
    elif not findings:
        print("no problems found")
    else:
        for repo, finding in findings:
            who = f" {finding.task}" if finding.task else ""
            fixed = f" [{finding.fixed}]" if finding.fixed else ""
            print(f"{repo.root}: {finding.kind}{who}: {finding.detail}{fixed}")
    return 0 if all(f.resolved for _, f in findings) else 1


def cmd_retain(args: argparse.Namespace) -> int:
    board = _board()
    ctx = _repo(board, args)
    task = board.retain(ctx, args.name)
    return _report(args, task, ctx, f"retained; {task.worktree_path} and {task.branch} kept")


def cmd_discard(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    board = _board()
    ctx = _repo(board, args)
    task = board.discard(ctx, args.name, force=args.force, on_wait=_print_wait)
    snaps = board.snapshots(task)
    if args.json:
        document = output.task_json(task, ctx.repo)
        document["snapshot"] = snaps[-1][1] if snaps else None
        output.emit_json(document)
    else:
        saved = f"; saved in {snaps[-1][1]} (laneboard restore {task.name})" if snaps else ""
        print(f"{task.name}: discarded{saved}")
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    board = _board()
    ctx = _repo(board, args)
    task = board.restore(ctx, args.name, as_name=args.as_name, on_wait=_print_wait)
    return _report(args, task, ctx, f"restored at {task.worktree_path} on {task.branch}")


def _print_output(chunk: bytes) -> None:
    """A setup command's output, passed through as it comes (to stderr: stdout is the result)."""
    sys.stderr.buffer.write(chunk) if hasattr(sys.stderr, "buffer") else sys.stderr.write(
        chunk.decode(errors="replace")
    )
    sys.stderr.flush()


def _print_wait(lease: Lease) -> None:
    """The one line a command prints when it has to wait for its lane."""
    lane = "the root lane" if lease.lane is None else "its lane"
    print(f"laneboard: waiting for {lane}: {lease.wait_reason}", file=sys.stderr, flush=True)


def cmd_exec(args: argparse.Namespace) -> int:
    from laneboard.core.adapters.config import load_settings
    from laneboard.core.adapters.db import Database, default_path
    from laneboard.core.adapters.leases import LeaseStore
    from laneboard.core.operations import exec as runner

    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("exec needs a command after `--`")
    if args.timeout is not None and not (0 <= args.timeout < float("inf")):
        raise UsageError("--timeout must be a finite number of seconds, 0 or more")
    database = Database(default_path())
    try:
        target = runner.resolve_target(database, _start(args), args.lane)
        settings = load_settings(target.root)
        store = LeaseStore(database, settings.lanes.slots)
        try:
            return runner.run(
                store,
                target,
                settings,
                command,
                timeout=args.timeout,
                on_wait=None if args.quiet else _print_wait,
            )
        except BaseException as err:
            code = runner.exit_code_for(err)
            if code is None:
                raise
            return code
    finally:
        database.close()


def cmd_lanes(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    board = _board()
    ctx = _repo_or_none(board, args)
    report = board.lanes(ctx)
    if args.json:
        output.emit_json(output.lanes_json(report))
    else:
        print(output.lanes_text(report))
    return 0


def cmd_shims(args: argparse.Namespace) -> int:
    from laneboard.sessions.shims import write_shims
    from laneboard.tui import output

    board = _board()
    ctx = _repo(board, args)
    task = board.task(ctx, args.name)
    if not task.live:
        raise LaneboardError(f"task {task.name} is {task.state.value}; it has no lane")
    commands = list(ctx.settings.lanes.wrap)
    directory = write_shims(task.id, task.name, ctx.root, commands)
    if args.json:
        output.emit_json(
            {"task": task.name, "task_id": task.id, "bin": str(directory), "commands": commands}
        )
    else:
        print(directory)
    return 0


def _parser() -> _Parser:
    parser = _Parser(prog="laneboard", description="Supervise coding agents in parallel worktrees.")
    parser.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    sub = parser.add_subparsers(dest="subcommand", parser_class=_Parser, metavar="COMMAND")

    def add(
        name: str, handler: Callable[[argparse.Namespace], int], help: str, *, json: bool = True
    ) -> _Parser:
        command = sub.add_parser(name, help=help, description=help)
        command.set_defaults(handler=handler)
        if json:
            command.add_argument("--json", action="store_true", help="print JSON (docs/cli.md)")
        command.add_argument(
            "--repo", metavar="PATH", default=argparse.SUPPRESS, help="the repository"
        )
        return command

    init = add("init", cmd_init, "register a repository")
    init.add_argument("path", nargs="?", help="a path inside the repository (default: cwd)")

    new = add("new", cmd_new, "create a task: branch, worktree (and, later, its agent)")
    new.add_argument("name")
    new.add_argument("--base", metavar="REF", help="commit to start from (default: HEAD)")
    new.add_argument("--no-start", action="store_true", help="provision only; start no agent")

    ls = add("ls", cmd_ls, "list tasks")
    ls.add_argument("--all", action="store_true", help="include retired tasks")

    for name, handler, help in (
        ("show", cmd_show, "show one task"),
        ("log", cmd_log, "show a task's whole journal"),
    ):
        add(name, handler, help).add_argument("name")
    verify = add("verify", cmd_verify, "verify a task's worktree (exit 1 when rejected)")
    verify.add_argument("name")
    verify.add_argument(
        "--repin",
        action="store_true",
        help="after a remount changed the device number: take the new one, if nothing else changed",
    )

    doctor = add("doctor", cmd_doctor, "reconcile the ledger with git; report, fix what is exact")
    doctor.add_argument("--fix", action="store_true", help="finish or undo interrupted changes")

    add("retain", cmd_retain, "stop the agent; keep worktree and branch").add_argument("name")
    discard = add("discard", cmd_discard, "snapshot and remove a task's worktree and branch")
    discard.add_argument("name")
    discard.add_argument(
        "--force",
        action="store_true",
        help="save uncommitted, untracked and unique work in a "
        "snapshot and remove anyway (other blockers still refuse)",
    )
    restore = add("restore", cmd_restore, "bring a discarded task back from its newest snapshot")
    restore.add_argument("name", help="the task's name or id")
    restore.add_argument("--as", dest="as_name", metavar="NAME", help="restore under another name")

    run = add("exec", cmd_exec, "run a command in a lane, waiting for admission", json=False)
    where = run.add_mutually_exclusive_group(required=True)
    where.add_argument("--lane", metavar="NAME", help="the task whose worktree lane to use")
    where.add_argument("--root", action="store_true", help="the repository's root lane")
    run.add_argument("--timeout", type=float, metavar="SECONDS", help="give up waiting (exit 75)")
    run.add_argument("--quiet", action="store_true", help="do not say what it waits for")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="-- CMD [ARG ...]")

    add("lanes", cmd_lanes, "show every lane: running and waiting leases, slots")

    shims = add("shims", cmd_shims, "(re)write a task's lane shims (lanes.wrap); print the bin dir")
    shims.add_argument("name")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `laneboard` console script."""
    for stream in (sys.stdout, sys.stderr):
        # Paths may hold any bytes: print them as the bytes they are, never fail on them.
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if args.subcommand is None:
            parser.print_help()
            return 0
        return int(args.handler(args))
    except LaneboardError as err:
        print(f"laneboard: {err}", file=sys.stderr)
        for detail in err.details:
            print(f"  {detail}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # the last line of defence against a traceback
        if os.environ.get("LANEBOARD_DEBUG"):
            raise
        print(f"laneboard: internal error: {type(err).__name__}: {err}", file=sys.stderr)
        print("  (set LANEBOARD_DEBUG=1 to see the traceback)", file=sys.stderr)
        return 1
    finally:
        while _OPENED:
            _OPENED.pop().ledger.close()


if __name__ == "__main__":
    sys.exit(main())
