"""`core` stays free of the UI and tmux stacks, so `laneboard exec` and scripts start fast; and
the installed package is `laneboard` alone."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_core_loads_without_textual_rich_libtmux_or_watchfiles() -> None:
    code = (
        "import sys, pkgutil, importlib, laneboard.core as core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'laneboard.core.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in "
        "{'textual', 'rich', 'libtmux', 'watchfiles'} or "
        "n.startswith(('laneboard.tui', 'laneboard.sessions')))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_the_domain_loads_without_pydantic_pygit2_or_sqlite() -> None:
    code = (
        "import sys, pkgutil, importlib, laneboard.core.domain as domain\n"
        "for m in pkgutil.walk_packages(domain.__path__, 'laneboard.core.domain.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] in "
        "{'pydantic', 'pygit2', 'sqlite3', 'subprocess'}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_cli_module_does_not_load_the_tui_stack() -> None:
    code = (
        "import sys, laneboard.tui.cli\n"
        "print(sorted(n for n in sys.modules if n.startswith(('textual', 'libtmux'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"


def test_python_m_laneboard_runs_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "laneboard", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: laneboard ")
