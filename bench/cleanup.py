"""Benchmark of discard and restore on a large worktree (run by hand; figures in the README).

    .venv/bin/python bench/cleanup.py [--files 20000]

Creates a throwaway repo of FILES small files, then times `laneboard new`, `discard --force`
(with one edited and one untracked file: gathers facts, hashes the worktree raw for the snapshot,
removes) and `restore` (worktree add + applying the snapshot). Removing and re-creating tens of
thousands of files is dominated by the filesystem: the script also times a plain
`git worktree add` made right after a removal, for comparison.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LANEBOARD = [sys.executable, "-P", "-m", "tui.cli"]


def timed(args: list[str], cwd: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=20_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LANEBOARD_HOME": str(base / "home"),
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@b",
        }
        per_dir = 100
        for n in range(args.files):
            directory = repo / "src" / f"d{n // per_dir}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"f{n % per_dir}.txt").write_text(f"file {n}\n" * 20)
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        subprocess.run(["git", "add", "-A"], cwd=repo, check=True, env=env)
        subprocess.run(["git", "commit", "-q", "-m", "big"], cwd=repo, check=True, env=env)
        print(f"{args.files} files, {os.cpu_count()} cores")
        print(
            f"new:               {timed([*LANEBOARD, 'new', 't', '--no-start'], repo, env):6.2f} s"
        )
        worktree = repo / ".worktrees" / "t"
        (worktree / "src" / "d0" / "f0.txt").write_text("edited\n")
        (worktree / "untracked.txt").write_text("new\n")
        print(
            f"discard --force:   {timed([*LANEBOARD, 'discard', 't', '--force'], repo, env):6.2f} s"
        )
        print(f"restore:           {timed([*LANEBOARD, 'restore', 't'], repo, env):6.2f} s")
        plain = base / "plain"
        subprocess.run(["git", "worktree", "add", "-q", str(plain), "HEAD"], cwd=repo, check=True)
        subprocess.run(["git", "worktree", "remove", "--force", str(plain)], cwd=repo, check=True)
        again = timed(["git", "worktree", "add", "-q", str(plain), "HEAD"], repo, env)
        print(f"plain git worktree add right after a removal: {again:6.2f} s")


if __name__ == "__main__":
    main()
