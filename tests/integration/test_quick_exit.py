"""A command line's process ends without Python's teardown only when nothing is lost by it
(`laneboard.tui.cli._end`): its output is all written, another thread finishes its work, what
waits to run at exit runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = "import sys\nfrom laneboard.tui.cli import _end\n" + body + "\n_end(3)\nsys.exit(4)\n"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered, as usual
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_it_ends_at_once_with_its_output_written(tmp_path: Path) -> None:
    done = _run(tmp_path, "print('partial', end=''); print('said', end='', file=sys.stderr)")
    assert (done.returncode, done.stdout, done.stderr) == (3, "partial", "said")


def test_a_thread_still_working_finishes_first(tmp_path: Path) -> None:
    body = (
        "import threading, time\n"
        "def work():\n"
        "    time.sleep(0.3)\n"
        "    open('written', 'w').write('all of it')\n"
        "threading.Thread(target=work).start()"
    )
    done = _run(tmp_path, body)
    assert done.returncode == 4
    assert (tmp_path / "written").read_text() == "all of it"


def test_what_waits_to_run_at_exit_runs(tmp_path: Path) -> None:
    body = "import atexit\natexit.register(lambda: open('written', 'w').write('at exit'))"
    done = _run(tmp_path, body)
    assert done.returncode == 4
    assert (tmp_path / "written").read_text() == "at exit"
