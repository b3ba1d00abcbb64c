"""Benchmark of a checkpoint against `git status` of the same worktree (run by hand; figures in
docs/review.md).

    .venv/bin/python bench/checkpoint.py [--files 40000] [--changed 20] [--runs 10]

Builds a throwaway repository with FILES tracked files (in directories of 100) and one task.
Then, RUNS times, alternating: changes CHANGED files and adds one untracked file in the task's
worktree (a turn's work), times `git status --porcelain=v2 --untracked-files=all` there (the
floor: what any look at the worktree costs), and times taking a checkpoint in this process
(`operations.checkpoints.take`, what the controller runs at a turn's end: status, capture of
what changed, the commit, its ref, the vault's copy, the ledger row). Prints the medians and
their ratio. The issue's goal: a checkpoint costs at most 2x the status.
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

from common import isolated_env

ROOT = Path(__file__).resolve().parent.parent


def build(repo: Path, files: int, env: dict[str, str]) -> None:
    repo.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, env=env, check=True)
    for i in range(files):
        folder = repo / f"d{i // 100:04d}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{i:06d}.txt").write_text(f"file {i}\n" * 4)
    subprocess.run(["git", "add", "-A"], cwd=repo, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "files"], cwd=repo, env=env, check=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=40000)
    parser.add_argument("--changed", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env = isolated_env(base, ROOT)
        (base / "gitconfig").write_text("[user]\n\tname = b\n\temail = b@b\n")
        repo = base / "repo"
        build(repo, args.files, env)
        laneboard = [sys.executable, "-m", "laneboard"]
        subprocess.run([*laneboard, "new", "t", "--no-start"], cwd=repo, env=env, check=True)
        worktree = repo / ".worktrees" / "t"
        os.environ.update(env)
        sys.path.insert(0, str(ROOT))
        from laneboard.core.adapters.ledger import Ledger
        from laneboard.core.domain.models import Actor
        from laneboard.core.operations import checkpoints
        from laneboard.core.operations.repos import open_repo

        ledger = Ledger.open_default()
        ctx = open_repo(ledger, repo, register=False, actor=Actor.CLI)
        task = ledger.live_task(ctx.repo.id, "t")
        assert task is not None
        status = ["git", "status", "--porcelain=v2", "-z", "--untracked-files=all"]
        floors, costs = [], []
        for run in range(args.runs):
            for i in range(args.changed):
                path = worktree / f"d{(run * 7 + i) % (args.files // 100):04d}" / "f000000.txt"
                target = next(path.parent.iterdir())
                target.write_text(f"turn {run} change {i}\n")
            (worktree / f"new-{run}.txt").write_text(f"untracked {run}\n")
            began = time.perf_counter()
            subprocess.run(status, cwd=worktree, env=env, stdout=subprocess.DEVNULL, check=True)
            floors.append(time.perf_counter() - began)
            began = time.perf_counter()
            made = checkpoints.take(ctx, ledger, task, Actor.CLI, turn=f"bench {run}")
            costs.append(time.perf_counter() - began)
            assert made is not None
        floor, cost = statistics.median(floors), statistics.median(costs)
        print(f"{args.files} files, {args.changed} changed + 1 untracked a turn, {args.runs} runs")
        print(f"git status (floor): {floor * 1000:.0f} ms")
        print(f"checkpoint:         {cost * 1000:.0f} ms")
        print(f"ratio:              {cost / floor:.2f}")


if __name__ == "__main__":
    main()
