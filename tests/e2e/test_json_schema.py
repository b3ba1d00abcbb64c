"""Every `--json` document keeps its fields: a golden file per command records each field's name
and type (nested objects and the items of lists included), and the test fails when one is
renamed, removed or changes type. New fields are allowed: the golden files are regenerated with
`LANEBOARD_UPDATE_GOLDEN=1` (review the diff: it is the interface scripts depend on)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import git
from tests.procs import exec_agent

GOLDEN = Path(__file__).parent.parent / "golden"
UPDATE = bool(os.environ.get("LANEBOARD_UPDATE_GOLDEN"))
"""Read at import: each test's isolated environment drops every `LANEBOARD_` variable."""


def shape(value: Any) -> Any:
    """A value's structure: objects by field, lists by their items' merged shape, scalars by
    type (`null` stands for "may be null")."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        merged: Any = None
        for item in value:
            merged = merge(merged, shape(item))
        return [merged] if merged is not None else []
    return {bool: "bool", int: "int", float: "number", str: "string"}.get(type(value), "null")


def merge(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        return {key: merge(a.get(key), b.get(key)) for key in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        return [merge(a[0] if a else None, b[0] if b else None)] if a or b else []
    if a == "null":
        return b
    if b == "null":
        return a
    if isinstance(a, str) and isinstance(b, str) and {a, b} == {"int", "number"}:
        return "number"
    return a


def missing(golden: Any, seen: Any, where: str = "") -> list[str]:
    """Fields of `golden` absent from `seen` or of another type."""
    if isinstance(golden, dict):
        if not isinstance(seen, dict):
            return [f"{where or 'document'}: an object became {seen!r}"]
        found = []
        for key, expected in golden.items():
            if key not in seen:
                found.append(f"{where}{key}: removed or renamed")
            else:
                found += missing(expected, seen[key], f"{where}{key}.")
        return found
    if isinstance(golden, list):
        if not isinstance(seen, list):
            return [f"{where}: a list became {seen!r}"]
        if golden and seen and golden[0] is not None:
            return missing(golden[0], seen[0], f"{where}[].")
        return []
    if golden in ("null", None) or seen in ("null", None):
        return []
    if isinstance(seen, str) and {golden, seen} == {"int", "number"}:
        return []
    return [] if golden == seen else [f"{where.rstrip('.')}: {golden} became {seen}"]


def check(name: str, document: Any) -> None:
    assert isinstance(document, dict) and document.get("schema", "").endswith("/1"), document
    seen = shape(document)
    path = GOLDEN / f"{name}.json"
    if UPDATE:
        golden = json.loads(path.read_text()) if path.exists() else None
        path.write_text(json.dumps(merge(golden, seen), indent=2, sort_keys=True) + "\n")
        return
    golden = json.loads(path.read_text())
    assert missing(golden, seen) == [], (
        f"{name}: fields changed; docs/cli.md and scripts rely on them"
    )


def _json(cli, *args: str, code: int = 0, cwd: Path | None = None) -> Any:
    result = cli(*args, "--json", cwd=cwd)
    assert result.code == code, result.err
    return json.loads(result.out)


@pytest.fixture
def board(repo: Path, cli) -> Path:
    """A repository with a task in each kind of situation a document describes."""
    (repo / ".laneboard.toml").write_text('[lanes]\nwrap = ["make"]\n')
    assert cli("new", "busy", "--no-start").code == 0
    worktree = repo / ".worktrees" / "busy"
    git(worktree, "commit", "-q", "--allow-empty", "-m", "work")
    (worktree / "notes.md").write_text("untracked\n")
    assert cli("new", "gone", "--no-start").code == 0
    return repo


def test_every_json_document_keeps_its_fields(board: Path, cli, tmp_path: Path) -> None:
    check("init", _json(cli, "init"))
    check("new", _json(cli, "new", "fresh", "--no-start"))
    check("ls", _json(cli, "ls", "--all"))
    check("show", _json(cli, "show", "busy"))
    check("log", _json(cli, "log", "busy"))
    check("verify", _json(cli, "verify", "busy"))
    check("shims", _json(cli, "shims", "busy"))
    running = exec_agent("busy", board)
    running.expect(r"^ready ")  # admitted before the root command asks, so that one waits
    waiting = exec_agent(None, board)
    try:
        waiting.expect(r"waiting for the root lane", "err")
        check("lanes", _json(cli, "lanes"))
        check("ls", _json(cli, "ls"))
    finally:
        running.send("exit 0")
        assert running.wait() == 0
        waiting.expect(r"^ready ")
        waiting.send("exit 0")
        assert waiting.wait() == 0
        running.close()
        waiting.close()
    check("review", _json(cli, "review", "busy", "--patch"))
    check("conflicts", _json(cli, "conflicts"))
    check("retain", _json(cli, "retain", "busy"))
    check("discard", _json(cli, "discard", "gone"))
    check("restore", _json(cli, "restore", "gone"))
    os.rename(board / ".worktrees" / "fresh", tmp_path / "moved-away")
    check("doctor", _json(cli, "doctor", code=1))
    (board / ".worktrees" / "busy" / "notes.md").unlink()
    (board / ".worktrees" / "busy" / "file.txt").write_text("committed\n")
    git(board / ".worktrees" / "busy", "add", "file.txt")
    git(board / ".worktrees" / "busy", "commit", "-q", "-m", "a file")
    assert cli("review", "busy", "--mark").code == 0
    assert cli("queue", "add", "busy").code == 0
    check("queue", _json(cli, "queue", "ls"))
    check("queue-run", _json(cli, "queue", "run"))
    check("queue", _json(cli, "queue", "ls", "--all"))
    assert cli("new", "later", "--no-start").code == 0
    later = board / ".worktrees" / "later"
    (later / "later.txt").write_text("later\n")
    git(later, "add", "later.txt")
    git(later, "commit", "-q", "-m", "later")
    assert cli("review", "later", "--mark").code == 0
    check("finalize", _json(cli, "finalize", "later", "--merge"))
