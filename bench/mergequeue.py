"""Benchmark of the merge queue against finalizing one task at a time (run by hand; figures in
docs/review.md).

    .venv/bin/python bench/mergequeue.py [--tasks 8] [--gate-seconds 5] [--culprit 5]

Builds two identical throwaway repositories with TASKS reviewed tasks each (one new file per
task; with `--culprit N`, task N also adds `broken.txt`, which the gate refuses), and a gate that
sleeps GATE_SECONDS and fails on `broken.txt`. Then integrates all of them: in one repository with
`laneboard finalize NAME --merge` for each task in turn (continuing past a failure), in the other
with `laneboard queue add` of all and one `laneboard queue run`. Prints, for each way, the wall
time, the gate runs (counted from the journals) and how many tasks landed; the floor is the
gate's own time for the runs it needed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import isolated_env

ROOT = Path(__file__).resolve().parent.parent
LANEBOARD = [sys.executable, "-m", "laneboard"]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def must(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = run(args, cwd, env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr}")
    return done.stdout


def prepare(base: Path, tasks: int, gate_seconds: float, culprit: int | None) -> Path:
    repo = base / "repo"
    repo.mkdir(parents=True)
    env = isolated_env(base, ROOT)
    must(["git", "init", "-q", "-b", "main"], repo, env)
    (repo / "README.md").write_text("bench\n")
    gate = f"sleep {gate_seconds}; test ! -f broken.txt"
    (repo / ".laneboard.toml").write_text(f"gate = '{gate}'\n")
    must(["git", "add", "-A"], repo, env)
    must(["git", "commit", "-q", "-m", "init"], repo, env)
    for i in range(1, tasks + 1):
        name = f"t{i}"
        must([*LANEBOARD, "new", name, "--no-start"], repo, env)
        worktree = repo / ".worktrees" / name
        (worktree / f"{name}.txt").write_text(f"{name}\n")
        if culprit == i:
            (worktree / "broken.txt").write_text("the gate refuses this\n")
        must(["git", "add", "-A"], worktree, env)
        must(["git", "commit", "-q", "-m", f"{name} work"], worktree, env)
        must([*LANEBOARD, "review", name, "--mark"], repo, env)
    return repo


def gate_runs(repo: Path, env: dict[str, str], tasks: int) -> int:
    runs = 0
    for i in range(1, tasks + 1):
        log = json.loads(must([*LANEBOARD, "log", f"t{i}", "--json"], repo, env))
        runs += sum(1 for e in log["events"] if e["kind"] == "gate.started")
    return runs


def landed(repo: Path, env: dict[str, str], tasks: int) -> int:
    count = 0
    for i in range(1, tasks + 1):
        shown = json.loads(must([*LANEBOARD, "show", f"t{i}", "--json"], repo, env))
        count += shown["state"] == "finalized"
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--gate-seconds", type=float, default=5.0)
    parser.add_argument("--culprit", type=int, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {}
        for way in ("one by one", "queue"):
            base = Path(tmp) / way.replace(" ", "-")
            repo = prepare(base, args.tasks, args.gate_seconds, args.culprit)
            env = isolated_env(base, ROOT)
            began = time.perf_counter()
            if way == "queue":
                names = [f"t{i}" for i in range(1, args.tasks + 1)]
                must([*LANEBOARD, "queue", "add", *names], repo, env)
                run([*LANEBOARD, "queue", "run"], repo, env)
            else:
                for i in range(1, args.tasks + 1):
                    run([*LANEBOARD, "finalize", f"t{i}", "--merge"], repo, env)
            took = time.perf_counter() - began
            runs = gate_runs(repo, env, args.tasks)
            results[way] = (took, runs, landed(repo, env, args.tasks))
        print(f"{args.tasks} tasks, gate {args.gate_seconds:g} s, culprit {args.culprit}")
        print(f"{'way':<12} {'wall s':>8} {'gate runs':>10} {'landed':>7} {'floor s':>8}")
        for way, (took, runs, count) in results.items():
            floor = runs * args.gate_seconds
            print(f"{way:<12} {took:>8.1f} {runs:>10} {count:>7} {floor:>8.1f}")
        one, queued = results["one by one"][0], results["queue"][0]
        print(f"queue / one by one: {queued / one:.2f}")


if __name__ == "__main__":
    main()
