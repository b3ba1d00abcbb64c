"""Benchmark of confinement (run by hand; figures in docs/confine.md).

    .venv/bin/python bench/confine.py [--files 5000] [--runs 20]

In a throwaway repository of FILES files with two tasks:
- `laneboard exec --lane a -- true`, confined (`[confine] mode = "auto"`, bwrap works) against
  `mode = "off"`, alternating, median of RUNS each;
- the agent pane's own start: the argv a confined pane runs (`sh` trampoline, bwrap with the
  task's mounts, `env --default-signal`) running `true`, against plain `true`;
- `git status` inside: a loop of RUNS `git status` in the task's worktree, inside one bwrap and
  outside it (bwrap's own start measured apart and taken off), per status.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import isolated_env, timed

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LANEBOARD = [sys.executable, "-P", "-m", "laneboard"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    from laneboard.core.adapters import confine
    from laneboard.core.domain.confine import bwrap_argv

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo, home = base / "repo", base / "lbhome"
        repo.mkdir()
        env = isolated_env(base, ROOT)
        for n in range(args.files):
            directory = repo / "src" / f"d{n // 100}"
            directory.mkdir(parents=True, exist_ok=True)
            (directory / f"f{n}.txt").write_text(f"{n}\n")
        for git_args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
            subprocess.run(["git", *git_args], cwd=repo, env=env, check=True)
        for name in ("a", "b"):
            timed([*LANEBOARD, "new", name, "--no-start"], repo, env)
        worktree = repo / ".worktrees" / "a"
        subprocess.run(["git", "status"], cwd=worktree, env=env, capture_output=True)

        config = repo / ".laneboard.toml"
        confined, unconfined = [], []
        for _ in range(args.runs):
            config.write_text('[confine]\nmode = "auto"\n')
            confined.append(timed([*LANEBOARD, "exec", "--lane", "a", "--", "true"], repo, env))
            config.write_text('[confine]\nmode = "off"\n')
            unconfined.append(
                timed([*LANEBOARD, "exec", "--quiet", "--lane", "a", "--", "true"], repo, env)
            )

        found = confine.probe(home)
        assert found.works and found.bwrap, found
        admin = (worktree / ".git").read_text().split("worktrees/")[-1].strip()
        layout = confine.layout(repo, repo / ".git", repo / ".worktrees", worktree, admin)
        wrapped = bwrap_argv(found.bwrap, layout, ["true"])
        bare = [timed(["true"], worktree, env) for _ in range(args.runs)]
        boxed = [timed(wrapped, worktree, env) for _ in range(args.runs)]

        loop = f"for i in $(seq {args.runs}); do git status >/dev/null; done"
        outside, inside = [], []
        for _ in range(5):
            outside.append(timed(["sh", "-c", loop], worktree, env))
            inside.append(timed(bwrap_argv(found.bwrap, layout, ["sh", "-c", loop]), worktree, env))
        start = statistics.median(boxed) - statistics.median(bare)

    def ms(values: list[float]) -> float:
        return statistics.median(values) * 1000

    print(f"{os.cpu_count()} cores; {args.files} files; medians of {args.runs}")
    print(f"exec --lane a -- true, confined   {ms(confined):7.1f} ms")
    print(f"exec --lane a -- true, mode off   {ms(unconfined):7.1f} ms")
    print(f"  added by confinement            {ms(confined) - ms(unconfined):7.1f} ms")
    print(f"pane argv running true, confined  {ms(boxed):7.1f} ms")
    print(f"true, plain                       {ms(bare):7.1f} ms")
    print(f"  added to a pane's start         {ms(boxed) - ms(bare):7.1f} ms")
    per_out = ms(outside) / args.runs
    per_in = (ms(inside) - start * 1000) / args.runs
    print(f"git status in the worktree, outside {per_out:6.2f} ms, inside {per_in:6.2f} ms")


if __name__ == "__main__":
    main()
