"""The `laneboard` command line: parse, call the application service, print, exit.

Exit codes: 0 success, 1 refused (the reason on stderr, one line per reason), 2 usage error,
75 gave up waiting. Bad input never produces a traceback; set `LANEBOARD_DEBUG=1` to see one for
an unexpected internal error. The TUI stack is imported only when the TUI is launched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from core.errors import LaneboardError, UsageError
from core.git import NotARepository
from core.ledger import Ledger
from core.repo import RepoContext
from core.service import Board
from tui import output


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _repo(board: Board, args: argparse.Namespace, *, register: bool = False) -> RepoContext:
    return board.repo(Path(args.repo or os.getcwd()), register=register)


def _repo_or_none(board: Board, args: argparse.Namespace) -> RepoContext | None:
    """The repo of `--repo` or the cwd; None when the cwd is in no repo and `--repo` is absent
    (the command then covers every registered repo)."""
    if args.repo:
        return _repo(board, args)
    try:
        return _repo(board, args)
    except NotARepository:
        return None


def cmd_init(board: Board, args: argparse.Namespace) -> int:
    ctx, created = board.init(Path(args.path or args.repo or os.getcwd()))
    if args.json:
        output.emit_json(
            {"repo": str(ctx.root), "common_dir": str(ctx.common_dir), "registered": created}
        )
    else:
        print(f"{'registered' if created else 'already registered'}: {ctx.root}")
    return 0


def cmd_new(board: Board, args: argparse.Namespace) -> int:
    if not args.no_start:
        raise UsageError("starting an agent is not available yet; pass --no-start")
    ctx = _repo(board, args, register=True)
    task = board.new(ctx, args.name, base=args.base)
    if args.json:
        output.emit_json(output.task_json(task, ctx.repo))
    else:
        print(f"{task.name}: {task.state.value} at {task.worktree_path} on {task.branch}")
    return 0


def cmd_ls(board: Board, args: argparse.Namespace) -> int:
    ctx = _repo_or_none(board, args)
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


def cmd_show(board: Board, args: argparse.Namespace) -> int:
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


def cmd_log(board: Board, args: argparse.Namespace) -> int:
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


def cmd_verify(board: Board, args: argparse.Namespace) -> int:
    ctx = _repo(board, args)
    task, verdict = board.verify(ctx, args.name)
    if args.json:
        output.emit_json(output.verdict_json(task, verdict))
    elif verdict.ok:
        print(f"ok: {task.worktree_path}")
    else:
        print(f"rejected: {verdict}", file=sys.stderr)
    return 0 if verdict.ok else 1


def cmd_doctor(board: Board, args: argparse.Namespace) -> int:
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
            fixed = f" [fixed: {finding.fixed}]" if finding.fixed else ""
            print(f"{repo.root}: {finding.kind}{who}: {finding.detail}{fixed}")
    return 1 if any(f.fixed is None for _, f in findings) else 0


def _parser() -> _Parser:
    parser = _Parser(prog="laneboard", description="Supervise coding agents in parallel worktrees.")
    parser.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    def add(name: str, handler: Callable[[Board, argparse.Namespace], int], help: str) -> _Parser:
        command = sub.add_parser(name, help=help, description=help)
        command.set_defaults(handler=handler)
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
        ("verify", cmd_verify, "verify a task's worktree (exit 1 when rejected)"),
    ):
        add(name, handler, help).add_argument("name")

    doctor = add("doctor", cmd_doctor, "reconcile the ledger with git; report, fix what is exact")
    doctor.add_argument("--fix", action="store_true", help="finish or undo interrupted changes")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `laneboard` console script."""
    try:
        args = _parser().parse_args(argv)
        if args.command is None:
            _parser().print_help()
            return 0
        ledger = Ledger.open_default()
        try:
            return int(args.handler(Board(ledger), args))
        finally:
            ledger.close()
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


if __name__ == "__main__":
    sys.exit(main())
