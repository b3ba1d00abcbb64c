"""The command line's parser, built from the commands declared once in
`laneboard.core.service.commands` (imported only when a command needs parsing: `exec`, which
every shim runs, reads its few options without it)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from laneboard import __version__
from laneboard.core.domain.errors import UsageError
from laneboard.core.service.commands import COMMANDS, Command

Handler = Callable[[argparse.Namespace], int]


class _Formatter(argparse.HelpFormatter):
    """argparse's help, as wide as the terminal without importing `shutil` (and the three
    compression modules it imports) for every command line, as argparse's default does."""

    def __init__(self, prog: str, **options: Any) -> None:
        options.setdefault("width", _columns() - 2)
        super().__init__(prog, **options)


def _columns() -> int:
    """The terminal's width as `shutil.get_terminal_size` tells it: `COLUMNS`, else the
    width of the terminal on stdout, else 80."""
    given = os.environ.get("COLUMNS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    try:
        found = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        found = 0
    return found or 80


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **options: Any) -> None:
        options.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **options)

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
    parser.add_argument(
        "--host", metavar="NAME", default=argparse.SUPPRESS, help="run it on this host (hosts.md)"
    )
    group = parser.add_mutually_exclusive_group(required=True) if declared.one_of else None
    for arg in declared.args:
        target = group if group is not None and arg.name in declared.one_of else parser
        extra: dict[str, Any] = {"dest": arg.dest} if arg.dest else {}
        if arg.kind == "positional":
            target.add_argument(arg.name, help=arg.help)
        elif arg.kind == "optional-positional":
            target.add_argument(arg.name, nargs="?", help=arg.help)
        elif arg.kind == "many":
            target.add_argument(arg.name, nargs="+", help=arg.help)
        elif arg.kind == "any":
            target.add_argument(arg.name, nargs="*", help=arg.help)
        elif arg.kind == "pair":
            names = tuple((arg.metavar or "A B").split(" ", 1))
            target.add_argument(arg.name, nargs=2, metavar=names, help=arg.help, **extra)
        elif arg.kind == "flag":
            target.add_argument(arg.name, action="store_true", help=arg.help, **extra)
        elif arg.kind == "option":
            kind = float if arg.number else str
            target.add_argument(arg.name, metavar=arg.metavar, type=kind, help=arg.help, **extra)
        else:
            target.add_argument(arg.name, nargs=argparse.REMAINDER, help=arg.help)


def _first_word(words: Sequence[str]) -> str | None:
    """The first word that is neither a top-level option nor its value."""
    after_option = False
    for word in words:
        if after_option:
            after_option = False
        elif word == "--repo":
            after_option = True
        elif not word.startswith("-"):
            return word
    return None


def build(handlers: dict[str, Handler], words: Sequence[str] = ()) -> _Parser:
    """The parser: one subcommand per declared command, each bound to its handler.

    When the first word of `words` that is not an option names a command, only that command's
    subparser is built (building all of them costs more than a read command's real work); any
    other command line (help, a typo, `--repo PATH` first) gets the whole parser, so what is
    accepted and every message are the same either way."""
    top = _Parser(prog="laneboard", description="Supervise coding agents in parallel worktrees.")
    top.add_argument("--version", action="version", version=f"laneboard {__version__}")
    top.add_argument("--repo", metavar="PATH", help="the repository (default: the current one)")
    sub = top.add_subparsers(dest="subcommand", parser_class=_Parser, metavar="COMMAND")
    wanted = [declared for declared in COMMANDS if declared.name == _first_word(words)]
    for declared in wanted or COMMANDS:
        _add_command(sub, declared, handlers)
    return top
