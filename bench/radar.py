"""Benchmark of the conflict radar (run by hand; figures in docs/review.md).

    .venv/bin/python bench/radar.py [--files 5000] [--tasks 20] [--rounds 3]

Builds a throwaway repository of FILES files, TASKS tasks (`laneboard new --no-start`), each
with one commit editing five files (neighbouring tasks overlap, so some pairs conflict) and a
commit on main, then times `laneboard conflicts --json` (TASKS targets + TASKS*(TASKS-1)/2
pairs):
- cold: with the merge cache emptied;
- warm: everything cached;
- one tip moved: one task commits again (its TASKS merges are computed, the rest cached);
against the floor: the same merges as plain `git merge-tree --write-tree` processes run one
after another, and `python -c pass`. Each figure is the median of ROUNDS.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

from common import isolated_env, timed

LANEBOARD = [sys.executable, "-P", "-m", "laneboard"]
ROOT = Path(__file__).resolve().parent.parent


def git(cwd: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr}")
    return done.stdout.strip()


def build(repo: Path, files: int, tasks: int, env: dict[str, str]) -> None:
    for n in range(files):
        directory = repo / "src" / f"d{n // 100}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{n}.txt").write_text("".join(f"{n} line {i}\n" for i in range(30)))
    git(repo, env, "init", "-q", "-b", "main")
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-q", "-m", "big")
    for t in range(tasks):
        timed([*LANEBOARD, "new", f"t{t}", "--no-start"], repo, env)
        edit(repo / ".worktrees" / f"t{t}", env, t, "first")
    (repo / "src" / "d0" / "f0.txt").write_text("main's own edit\n")
    git(repo, env, "commit", "-q", "-am", "main moves")


def edit(worktree: Path, env: dict[str, str], t: int, label: str) -> None:
    for n in range(t * 3, t * 3 + 5):  # overlaps the next task's first two files
        path = worktree / "src" / f"d{n // 100}" / f"f{n}.txt"
        path.write_text(f"task {t} {label}\n" + path.read_text())
    git(worktree, env, "commit", "-q", "-am", f"t{t} {label}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo, home = base / "repo", base / "lbhome"
        repo.mkdir()
        env = isolated_env(base, ROOT)
        build(repo, args.files, args.tasks, env)
        run(args, repo, home, env)


def run(args: argparse.Namespace, repo: Path, home: Path, env: dict[str, str]) -> None:
    conflicts = [*LANEBOARD, "conflicts", "--json"]
    ledger = home / "ledger.sqlite3"

    def empty_cache() -> None:
        with sqlite3.connect(ledger) as db:
            db.execute("DELETE FROM merges")

    cold, warm, moved = [], [], []
    for r in range(args.rounds):
        empty_cache()
        cold.append(timed(conflicts, repo, env))
        warm.append(timed(conflicts, repo, env))
        edit(repo / ".worktrees" / "t0", env, 0, f"round {r}")
        moved.append(timed(conflicts, repo, env))
    doc = json.loads(subprocess.run(conflicts, cwd=repo, env=env, capture_output=True).stdout)
    overlaps = doc["repos"][0]["overlaps"]
    dirty = sum(1 for o in overlaps if not o["clean"])
    tips = [git(repo, env, "rev-parse", f"lb/t{t}") for t in range(args.tasks)]
    main_tip = git(repo, env, "rev-parse", "main")
    merges = [(main_tip, tip) for tip in tips] + list(combinations(tips, 2))
    serial = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for a, b in merges:
            subprocess.run(
                ["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", a, b],
                cwd=repo,
                env=env,
                capture_output=True,
            )
        serial.append(time.perf_counter() - start)
    python = [timed([sys.executable, "-c", "pass"], repo, env) for _ in range(5)]

    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1000

    print(
        f"{os.cpu_count()} cores; {args.files} files; {args.tasks} tasks: "
        f"{len(overlaps)} merges ({args.tasks} against main), {dirty} conflicting"
    )
    print(f"laneboard conflicts, cold        {ms(cold):8.0f} ms")
    print(f"laneboard conflicts, warm        {ms(warm):8.0f} ms")
    print(f"laneboard conflicts, 1 tip moved {ms(moved):8.0f} ms")
    print(f"floor: {len(merges)} git merge-tree, serial {ms(serial):8.0f} ms")
    print(f"floor: python -c pass            {ms(python):8.1f} ms")
    print(f"cold / serial floor: {ms(cold) / ms(serial):.2f}x")


if __name__ == "__main__":
    main()
