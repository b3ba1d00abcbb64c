"""The command line's parser, built from the commands declared once in
`laneboard.core.service.commands` (imported only when a command needs parsing: `exec`, which
every shim runs, reads its few options without it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, NoReturn

from laneboard import __version__
from laneboard.core.domain.errors import UsageError
from laneboard.core.service.commands import COMMANDS, Command

Handler = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def _add_command(
    sub: argparse._SubParsersAction[_Parser], declared: Command, handlers: dict[str, Handler]
) -> None:
    """One subcommand of the parser, as its declaration says."""
    parser = sub.add_parser(declared.name, help=declared.help, description=declared.help)
    parser.set_defaults(handler=handlers[declared.name], command=declared.name)
    if declared.json:
        parser.add_argument("--json", action="store_true", help="print JSON (docs/cli.md)")
    parser.add_argument("--repo", metavar="PATH", default=argparse.SUPPRESS, help="the repository")
    group = parser.add_mutually_exclusive_group(required=True) if declared.one_of else None
    for arg in declared.args:
        target = group if group is not None and arg.name in declared.one_of else parser
        extra: dict[str, Any] = {"dest": arg.dest} if arg.dest else {}
        if arg.kind == "positional":
            target.add_argument(arg.name, help=arg.help)
        elif arg.kind == "optional-positional":
            target.add_argument(arg.name, nargs="?", help=arg.help)
        elif arg.kind == "flag":
            target.add_argument(arg.name, action="store_true", help=arg.help, **extra)
        elif arg.kind == "option":
            kind = float if arg.number else str
            target.add_argument(arg.name, metavar=arg.metavar, type=kind, help=arg.help, **extra)
        else:
            target.add_argument(arg.name, nargs=argparse.REMAINDER, help=arg.help)


def build(handlers: dict[str, Handler]) -> _Parser:
    """The whole parser: one subcommand per declared command, each bound to its handler."""
    top = _Parser(prog="laneboard", description="Supervise coding agents in parallel worktrees.")
    top.add_argument("--version", action="version", version=f"laneboard {__version__}")
    top.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    sub = top.add_subparsers(dest="subcommand", parser_class=_Parser, metavar="COMMAND")
    for declared in COMMANDS:
        _add_command(sub, declared, handlers)
    return top
