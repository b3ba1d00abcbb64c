"""Benchmark of lane admission (run by hand; results go in docs/lanes.md).

    .venv/bin/python bench/lanes.py [--duration SECONDS] [--runs N]

In a throwaway repo and LANEBOARD_HOME it measures, with real `laneboard exec` processes:
  1. two commands of DURATION in sibling lanes, 2 slots        (target: about 1 x DURATION)
  2. two commands of DURATION in the same lane, 2 slots        (target: about 2 x DURATION)
  3. a root command submitted after 1's two have started       (must start after both end)
  4. two commands of DURATION in sibling lanes, 1 slot         (target: about 2 x DURATION)
  5. overhead of `laneboard exec --lane a -- true` over `true` (median of RUNS; target < 150 ms)
  6. wake-up latency: from a holder's release to the waiting command's start (median, max);
     the waiting command is `sh -c 'date > stamp'`, so the figure includes starting sh and date
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from laneboard.core.adapters.db import Database  # noqa: E402
from laneboard.core.adapters.leases import LeaseStore  # noqa: E402

LANEBOARD = [sys.executable, "-P", "-m", "laneboard"]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=True)


def start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, cwd=cwd, env=env, stderr=subprocess.DEVNULL)


def exec_cmd(lane: str | None, command: list[str]) -> list[str]:
    where = ["--root"] if lane is None else ["--lane", lane]
    return [*LANEBOARD, "exec", "--quiet", *where, "--", *command]


def wait_running(store: LeaseStore, count: int) -> None:
    """Until `count` exec leases run (polls the ledger; only the benchmark does this)."""
    while sum(1 for x in store.active() if x.state.value == "running") < count:
        time.sleep(0.01)


def pair(lanes: tuple[str, str], duration: float, cwd: Path, env: dict[str, str]) -> float:
    began = time.monotonic()
    procs = [start(exec_cmd(lane, ["sleep", str(duration)]), cwd, env) for lane in lanes]
    for proc in procs:
        proc.wait()
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    d = args.duration

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        repo.mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LANEBOARD_HOME": str(base / "home"),
            "LANEBOARD_SLOTS": "2",
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@b",
        }
        run(["git", "init", "-q"], repo, env)
        run(["git", "commit", "-q", "--allow-empty", "-m", "i"], repo, env)
        for name in ("a", "b"):
            run([*LANEBOARD, "new", name, "--no-start"], repo, env)
        database = Database(base / "home" / "ledger.sqlite3")
        store = LeaseStore(database, 2)

        print(f"duration {d:g}s, python {sys.version.split()[0]}, {os.cpu_count()} cores")
        siblings = pair(("a", "b"), d, repo, env)
        print(f"1. sibling lanes, 2 slots:  {siblings:6.2f}s  ({siblings / d:.2f} x duration)")
        same = pair(("a", "a"), d, repo, env)
        print(f"2. same lane, 2 slots:      {same:6.2f}s  ({same / d:.2f} x duration)")

        began = time.monotonic()
        first = [start(exec_cmd(lane, ["sleep", str(d)]), repo, env) for lane in ("a", "b")]
        wait_running(store, 2)
        root = start(exec_cmd(None, ["true"]), repo, env)
        for proc in [*first, root]:
            proc.wait()
        leases = store.admitted_in_order()[-3:]
        ends = max(x.released_at or 0 for x in leases[:2])
        root_start = leases[2].admitted_at or 0
        print(
            f"3. root after both:         starts {root_start - ends:+.3f}s after the later end "
            f"(total {time.monotonic() - began:.2f}s)"
        )

        one_slot = {**env, "LANEBOARD_SLOTS": "1"}
        serial = pair(("a", "b"), d, repo, one_slot)
        print(f"4. sibling lanes, 1 slot:   {serial:6.2f}s  ({serial / d:.2f} x duration)")

        def timed(command: list[str]) -> float:
            t = time.perf_counter()
            subprocess.run(command, cwd=repo, env=env, check=True)
            return time.perf_counter() - t

        bare = statistics.median(timed(["true"]) for _ in range(args.runs))
        laned = statistics.median(timed(exec_cmd("a", ["true"])) for _ in range(args.runs))
        print(
            f"5. exec overhead:           {1000 * (laned - bare):6.1f} ms  "
            f"(exec {1000 * laned:.1f} ms, true {1000 * bare:.1f} ms, median of {args.runs})"
        )
        # A repo config file makes exec validate it (pydantic is imported only then).
        (repo / ".laneboard.toml").write_text("[lanes]\nrepo_cap = 2\n")
        configured = statistics.median(timed(exec_cmd("a", ["true"])) for _ in range(args.runs))
        (repo / ".laneboard.toml").unlink()
        print(
            f"   with a .laneboard.toml:  {1000 * (configured - bare):6.1f} ms  "
            f"(exec {1000 * configured:.1f} ms)"
        )

        latencies = []
        stamp = base / "stamp"
        for _ in range(max(5, args.runs // 4)):
            holder = start(exec_cmd("a", ["sleep", "0.3"]), repo, env)
            wait_running(store, 1)
            waiter = start(exec_cmd("a", ["sh", "-c", f"date +%s.%N > {stamp}"]), repo, env)
            holder.wait()
            waiter.wait()
            released = store.admitted_in_order()[-2].released_at or 0
            admitted = store.admitted_in_order()[-1].admitted_at or 0
            started = float(stamp.read_text())
            latencies.append((admitted - released, started - released))
        admit = [a for a, _ in latencies]
        begin = [s for _, s in latencies]
        print(
            f"6. wake-up: release -> admitted median {1000 * statistics.median(admit):.1f} ms "
            f"(max {1000 * max(admit):.1f}); release -> command running median "
            f"{1000 * statistics.median(begin):.1f} ms (max {1000 * max(begin):.1f}), "
            f"{len(latencies)} runs"
        )
        database.close()


if __name__ == "__main__":
    main()
