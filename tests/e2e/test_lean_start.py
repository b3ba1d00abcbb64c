"""Each command loads what it uses: `new`, `ls` and `restore` never import pygit2 (its import
alone was half of `new`'s start-up); discard, which writes a snapshot's objects, does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

PROBE = (
    "import sys\n"
    "from laneboard.tui.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('pygit2' in sys.modules, code)\n"
)


def loads_pygit2(repo: Path, *args: str) -> bool:
    done = subprocess.run(
        [sys.executable, "-P", "-c", PROBE, *args],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=False,
    )
    loaded, code = done.stdout.split()[-2:]
    assert code == "0", done.stderr
    return loaded == "True"


def test_new_ls_and_restore_do_not_load_pygit2_but_discard_does(repo: Path) -> None:
    """Regression: `steps/creation.py` imported the snapshot adapter (pygit2) at module level,
    so every `new` paid for it (79 ms of its 156 ms of imports); a restore, which only reads a
    snapshot through git, paid 27-39 ms for it (its ref looked up through pygit2)."""
    assert not loads_pygit2(repo, "new", "t", "--no-start")
    assert not loads_pygit2(repo, "ls")
    (repo / ".worktrees" / "t" / "notes.txt").write_text("work\n")
    assert loads_pygit2(repo, "discard", "t", "--force")
    assert not loads_pygit2(repo, "restore", "t")
    assert (repo / ".worktrees" / "t" / "notes.txt").read_text() == "work\n"
