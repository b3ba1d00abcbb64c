"""Configuration files as the command line meets them: a file laneboard cannot read as its
settings is named in one line, the command exits non-zero, and nothing changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

NOT_UTF8 = b'[confine]\nmode = "\xff"\n'
"""A TOML file with one byte that is not UTF-8, at offset 18."""


def _user_config() -> Path:
    home = Path(os.environ["LANEBOARD_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    return home / "config.toml"


@pytest.mark.parametrize("kind", ["repo", "user"])
def test_a_config_file_that_is_not_utf8_is_one_line_and_changes_nothing(
    repo: Path, cli, kind: str
) -> None:
    """Regression: `internal error: UnicodeDecodeError` for a `.laneboard.toml` (or
    `config.toml`) saved in another encoding."""
    assert cli("new", "a", "--no-start").code == 0
    tasks = cli("ls", "--json", "--all").out
    path = repo / ".laneboard.toml" if kind == "repo" else _user_config()
    path.write_bytes(NOT_UTF8)
    line = f"laneboard: {path}: not UTF-8 text (byte 0xff at offset 18)\n"
    for args in (["new", "b", "--no-start"], ["exec", "--lane", "a", "--", "touch", "ran"]):
        result = cli(*args)
        assert (result.code, result.err) == (1, line), args
    assert path.read_bytes() == NOT_UTF8
    assert not (repo / ".worktrees" / "b").exists()
    assert not (repo / ".worktrees" / "a" / "ran").exists()
    path.unlink()
    assert cli("ls", "--json", "--all").out == tasks
