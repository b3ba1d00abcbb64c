"""`core` stays free of the UI and tmux stacks, so `laneboard exec` and scripts start fast."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT


def test_core_loads_without_textual_rich_libtmux_or_watchfiles() -> None:
    code = (
        "import sys, pkgutil, importlib, core\n"
        "for m in pkgutil.walk_packages(core.__path__, 'core.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = sorted(n for n in sys.modules if n.split('.')[0] in "
        "{'textual', 'rich', 'libtmux', 'watchfiles', 'tui', 'sessions'})\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""


def test_cli_module_does_not_load_the_tui_stack() -> None:
    code = (
        "import sys, tui.cli\n"
        "print(sorted(n for n in sys.modules if n.startswith(('textual', 'libtmux'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
