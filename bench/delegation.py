"""Benchmark of delegation (run by hand; figures in docs/delegation.md).

    .venv/bin/python bench/delegation.py [--files 5000] [--runs 10]

In a throwaway repository of FILES files, `LANEBOARD_HOME` and a private tmux server:
- spawning a child: `laneboard new CHILD --parent P --no-start` (the parent's HEAD read, the
  branch and worktree made and pinned), median over RUNS (floor: `git worktree add` of the same
  tree plus `git worktree remove`, the git work alone);
- a completion record: `laneboard show CHILD --json` with its `completion` (floor: `laneboard
  show CHILD --json` reading the task alone is not separable, so `git status` of the worktree
  and `git diff --numstat` from its base, the git it runs);
- waking a waiter: a `--cmd` child that exits when told; the time from telling it (a line
  typed with `tmux send-keys`) to `laneboard wait CHILD` returning, median over RUNS (the waiter
  is already blocked on the change feed; floor: `python -c pass`, one process start).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import isolated_env, timed

ROOT = Path(__file__).resolve().parent.parent
LANEBOARD = [sys.executable, "-m", "laneboard"]


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:7.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lb-bench-deleg-") as tmp:
        base = Path(tmp)
        env = isolated_env(base, ROOT)
        env["LANEBOARD_TMUX_SOCKET"] = f"lb-bench-{os.getpid()}"
        (base / "gitconfig").write_text("[user]\n\tname = b\n\temail = b@b\n")
        (base / "lbhome").mkdir()
        (base / "lbhome" / "config.toml").write_text("[delegation]\nmax_children = 1000\n")
        repo = base / "repo"
        repo.mkdir()
        for n in range(args.files):
            folder = repo / f"d{n % 50}"
            folder.mkdir(exist_ok=True)
            (folder / f"f{n}.txt").write_text(f"file {n}\n" * 5)
        for git in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
            subprocess.run(["git", *git], cwd=repo, env=env, check=True)
        try:
            run(repo, env, args.runs, args.files)
        finally:
            subprocess.run(
                ["tmux", "-L", env["LANEBOARD_TMUX_SOCKET"], "kill-server"],
                capture_output=True,
                check=False,
            )


def run(repo: Path, env: dict[str, str], runs: int, files: int) -> None:
    timed([*LANEBOARD, "new", "p", "--no-start"], repo, env)
    spawn, floor = [], []
    for n in range(runs):
        spawn.append(timed([*LANEBOARD, "new", f"c{n}", "--parent", "p", "--no-start"], repo, env))
        path = repo.parent / f"plain{n}"
        began = time.perf_counter()
        timed(["git", "worktree", "add", "-q", "-b", f"plain{n}", str(path)], repo, env)
        timed(["git", "worktree", "remove", str(path)], repo, env)
        floor.append(time.perf_counter() - began)
        timed([*LANEBOARD, "cancel", f"c{n}"], repo, env)
    ratio = statistics.median(spawn) / statistics.median(floor)
    print(
        f"spawn a child ({files} files)   {median_ms(spawn)}   "
        f"floor (git worktree add + remove) {median_ms(floor)}   ratio {ratio:.1f}"
    )

    timed([*LANEBOARD, "new", "rec", "--parent", "p", "--no-start"], repo, env)
    work = repo / ".worktrees" / "rec"
    (work / "new.txt").write_text("x\n")
    subprocess.run(["git", "add", "new.txt"], cwd=work, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "c"], cwd=work, env=env, check=True)
    record = [timed([*LANEBOARD, "show", "rec", "--json"], repo, env) for _ in range(runs)]
    base = json.loads(
        subprocess.run(
            [*LANEBOARD, "show", "rec", "--json"],
            cwd=repo,
            env=env,
            capture_output=True,
            check=True,
        ).stdout
    )["base_sha"]
    gitfloor = []
    for _ in range(runs):
        began = time.perf_counter()
        timed(["git", "status", "--porcelain=v2"], work, env)
        timed(["git", "diff", "--numstat", f"{base}..HEAD"], work, env)
        gitfloor.append(time.perf_counter() - began)
    print(
        f"show --json with its completion   {median_ms(record)}   "
        f"floor (git status + diff --numstat) {median_ms(gitfloor)}"
    )

    worker = shlex.join([sys.executable, "-c", "input(); print('bye')"])
    wake, start = [], []
    for n in range(runs):
        name = f"w{n}"
        timed([*LANEBOARD, "new", name, "--parent", "p", "--cmd", worker], repo, env)
        shown = subprocess.run(
            [*LANEBOARD, "show", name, "--json"], cwd=repo, env=env, capture_output=True, check=True
        )
        pane = json.loads(shown.stdout)["pane"]["pane_id"]
        waiter = subprocess.Popen(
            [*LANEBOARD, "wait", name, "--timeout", "60"],
            cwd=repo,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        time.sleep(1.0)  # the waiter is blocked on the feed by now
        began = time.perf_counter()
        subprocess.run(
            ["tmux", "-L", env["LANEBOARD_TMUX_SOCKET"], "send-keys", "-t", pane, "go", "Enter"],
            check=True,
        )
        waiter.wait(timeout=60)
        wake.append(time.perf_counter() - began)
        start.append(timed([sys.executable, "-c", "pass"], repo, env))
        timed([*LANEBOARD, "cancel", name], repo, env)
    print(
        f"child exits -> wait returns        {median_ms(wake)}   "
        f"floor (python -c pass) {median_ms(start)}"
    )


if __name__ == "__main__":
    main()
