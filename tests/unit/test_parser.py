"""The command line parser: building only the named command's subparser accepts and rejects
exactly what the whole parser does."""

from __future__ import annotations

import pytest

from laneboard.core.domain.errors import UsageError
from laneboard.core.service.commands import COMMANDS
from laneboard.tui.commands import handlers
from laneboard.tui.parser import build

LINES = [
    ["ls"],
    ["ls", "--all", "--json"],
    ["--repo", "ls", "show", "t"],  # a repository directory that happens to be named `ls`
    ["--repo=/somewhere", "show", "t", "--verbose"],
    ["show", "t", "--json"],
    ["discard", "t", "--force"],
    ["lanes"],
    ["new", "t", "--no-start", "--base", "HEAD"],
    ["exec", "--lane", "t", "--", "make", "-j4"],
    ["restore", "t", "--as", "u"],
    ["ls", "--no-such-flag"],
    ["no-such-command"],
    ["show"],
    [],
]


def _parse(words: list[str], partial: bool) -> tuple[str, object]:
    parser = build(handlers(), words if partial else ())
    try:
        parsed = vars(parser.parse_args(words))
    except (UsageError, SystemExit) as err:
        return ("refused", str(err))
    parsed.pop("handler", None)
    return ("parsed", parsed)


@pytest.mark.parametrize("words", LINES, ids=" ".join)
def test_the_partial_parser_agrees_with_the_whole_one(words: list[str]) -> None:
    assert _parse(words, partial=True) == _parse(words, partial=False)


def _choices(words: list[str]) -> list[str]:
    parser = build(handlers(), words)
    return [
        name
        for action in parser._actions
        if action.dest == "subcommand" and action.choices
        for name in action.choices
    ]


def test_a_named_command_gets_its_subparser_alone_and_anything_else_all() -> None:
    everything = [declared.name for declared in COMMANDS]
    for name in everything:
        assert _choices([name, "--json"]) == [name]
    assert _choices(["--repo", "ls"]) == everything
    assert _choices(["--help"]) == everything
