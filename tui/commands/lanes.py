"""Lane commands: exec (run for every shimmed tool, so it imports nothing it does not need),
lanes and shims."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from laneboard.core.domain.errors import UsageError
from laneboard.tui.commands.common import (
    here_or_all,
    print_note,
    print_wait,
    repo_arg,
)
from laneboard.tui.root import open_service

if TYPE_CHECKING:
    import argparse

    pass


def cmd_exec(args: argparse.Namespace) -> int:
    from laneboard.core.service.lanes import run_in_lane

    command = list(args.argv)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UsageError("exec needs a command after `--`")
    if args.timeout is not None and not (0 <= args.timeout < float("inf")):
        raise UsageError("--timeout must be a finite number of seconds, 0 or more")
    return run_in_lane(
        repo_arg(args),
        None if args.root else args.lane,
        command,
        timeout=args.timeout,
        on_wait=None if args.quiet else print_wait,
        on_note=None if args.quiet else print_note,
    )


def cmd_lanes(args: argparse.Namespace) -> int:
    from laneboard.tui import output

    service = open_service()
    _, report = here_or_all(args, service.lanes)
    if args.json:
        output.emit_json(output.lanes_document(report))
    else:
        print(output.lanes_text(report))
    return 0


def cmd_shims(args: argparse.Namespace) -> int:
    from laneboard.sessions.shims import write_shims
    from laneboard.tui import output

    service = open_service()
    plan = service.shims(repo_arg(args), args.name)
    root = Path(service.repo(repo_arg(args)).root)
    write_shims(plan.task.id, plan.task.name, root, list(plan.commands), Path(plan.path))
    if args.json:
        output.emit_json(output.shims_document(plan))
    else:
        print(plan.path)
    return 0
