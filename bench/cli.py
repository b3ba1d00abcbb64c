"""Benchmark of the command line's start-up, each command against `python -c pass` in the same
run (run by hand; figures in docs/cli.md).

    .venv/bin/python bench/cli.py [--tasks 50] [--runs 20]

Creates a throwaway repository with TASKS provisioned tasks, then times, alternating, RUNS runs
each of: `python -c pass` (the floor), the import of the standard library modules every
command needs (`STDLIB_FLOOR`), `laneboard ls` (the real work: one `git status` per
worktree, also timed on its own as `git status xN`), `laneboard show t0`, `laneboard lanes`,
and `laneboard exec --lane t0 -- true`. Bytecode is written as for an installed laneboard
(PYTHONDONTWRITEBYTECODE is unset). Prints medians and each command's ratio to the floor.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import timed

ROOT = Path(__file__).resolve().parent.parent
STDLIB_FLOOR = "import argparse, contextlib, json, pathlib, signal, sqlite3, subprocess, threading"
"""The standard library modules every laneboard command needs (the ledger is SQLite, paths are
pathlib, commands run as subprocesses with their signals forwarded): what any Python CLI built
this way pays before its first line of work."""
LANEBOARD = [sys.executable, "-m", "laneboard"]


def statuses(worktrees: list[Path], env: dict[str, str]) -> float:
    """The real work of `ls`: a `git status` per worktree, eight at a time, as laneboard does."""
    began = time.perf_counter()
    for start in range(0, len(worktrees), 8):
        running = [
            subprocess.Popen(
                ["git", "status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all"],
                cwd=path,
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for path in worktrees[start : start + 8]
        ]
        for proc in running:
            proc.wait()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        repo.mkdir()
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env.update(
            LANEBOARD_HOME=str(base / "home"),
            GIT_AUTHOR_NAME="b",
            GIT_AUTHOR_EMAIL="b@b",
            GIT_COMMITTER_NAME="b",
            GIT_COMMITTER_EMAIL="b@b",
        )
        for n in range(200):
            (repo / f"file{n}.txt").write_text(f"{n}\n" * 50)
        for git_args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
            subprocess.run(["git", *git_args], cwd=repo, check=True, env=env)
        for n in range(args.tasks):
            subprocess.run(
                [*LANEBOARD, "new", f"t{n}", "--no-start"],
                cwd=repo,
                env=env,
                check=True,
                capture_output=True,
            )
        worktrees = [repo / ".worktrees" / f"t{n}" for n in range(args.tasks)]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "stdlib floor (imports only)": [sys.executable, "-c", STDLIB_FLOOR],
            f"laneboard ls ({args.tasks} tasks)": [*LANEBOARD, "ls"],
            "laneboard show t0": [*LANEBOARD, "show", "t0"],
            "laneboard lanes": [*LANEBOARD, "lanes"],
            "laneboard exec --lane t0 -- true": [*LANEBOARD, "exec", "--lane", "t0", "--", "true"],
        }
        figures: dict[str, list[float]] = {name: [] for name in commands}
        figures[f"git status x{args.tasks} (ls's real work)"] = []
        for argv in commands.values():
            timed(argv, repo, env)  # warm: bytecode written, caches filled
        for _ in range(args.runs):
            for name, argv in commands.items():
                figures[name].append(timed(argv, repo, env))
            figures[f"git status x{args.tasks} (ls's real work)"].append(statuses(worktrees, env))
    median = {name: statistics.median(values) for name, values in figures.items()}
    floor = median["python -c pass"]
    print(f"{os.cpu_count()} cores, {args.runs} runs each, medians")
    for name, seconds in median.items():
        print(f"{name:<44} {seconds * 1000:7.1f} ms  {seconds / floor:5.1f}x python -c pass")


if __name__ == "__main__":
    main()
