"""Benchmark of new, discard and restore on a large worktree, each against its floor in the
same run (run by hand; figures in docs/cleanup.md).

    .venv/bin/python bench/cleanup.py [--files 40000] [--rounds 3]

Builds a throwaway repository of FILES files with realistic sizes (log-normal, median ~4 KB,
a few up to 400 KB; about 10 KB on average), then, ROUNDS times, alternating laneboard and
plain git on the same tree:

- `new` against `git branch` + `git worktree add` (the floor);
- a clean `discard` against `git worktree remove` + `git branch -D`;
- `discard --force` with a few edited and untracked files against
  `git worktree remove --force` + `git branch -D`;
- `restore` against a plain `git worktree add`.

Each figure is the median of the rounds; the ratio is laneboard's time over its floor's. Every
timed step starts after `sync`, so that one step's write-back is not counted in the next.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import timed

ROOT = Path(__file__).resolve().parent.parent
LANEBOARD = [sys.executable, "-P", "-m", "laneboard"]


def build(repo: Path, files: int, env: dict[str, str]) -> int:
    rng = random.Random(1)
    total = 0
    for n in range(files):
        directory = repo / "src" / f"m{n // 400}" / f"d{(n // 40) % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        size = int(min(400_000, rng.lognormvariate(8.3, 1.2)))
        line = f"line of file {n} with some text to fill it up nicely ok\n".encode()
        (directory / f"f{n % 40}.py").write_bytes((line * (size // len(line) + 1))[:size])
        total += size
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "big"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=env)
    return total


def dirty(worktree: Path) -> None:
    """A few edited and untracked files, as an agent leaves them."""
    for n in range(5):
        (worktree / "src" / "m0" / "d0" / f"f{n}.py").write_text(f"edited {n}\n")
        (worktree / f"notes-{n}.md").write_text(f"untracked {n}\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {}

    def note(name: str, seconds: float) -> None:
        figures.setdefault(name, []).append(seconds)

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        repo.mkdir()
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LANEBOARD_HOME": str(base / "home"),
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@b",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@b",
        }
        size = build(repo, args.files, env)
        print(f"{args.files} files, {size / 1e6:.0f} MB, {os.cpu_count()} cores")
        plain = base / "plain"
        for n in range(args.rounds):
            name = f"t{n}"
            worktree = repo / ".worktrees" / name
            git_add = ["git", "worktree", "add", "-q", "-b", f"plain{n}", str(plain)]
            note("floor: git worktree add -b", timed(git_add, repo, env, sync=True))
            remove = ["git", "worktree", "remove", str(plain)]
            note(
                "floor: git worktree remove + branch -D",
                timed(remove, repo, env, sync=True)
                + timed(["git", "branch", "-q", "-D", f"plain{n}"], repo, env, sync=True),
            )
            note(
                "laneboard new",
                timed([*LANEBOARD, "new", name, "--no-start"], repo, env, sync=True),
            )
            note(
                "laneboard discard (clean)",
                timed([*LANEBOARD, "discard", name], repo, env, sync=True),
            )

            forced = f"f{n}"
            timed([*LANEBOARD, "new", forced, "--no-start"], repo, env, sync=True)
            dirty(repo / ".worktrees" / forced)
            subprocess.run(
                ["git", "worktree", "add", "-q", "-b", f"pf{n}", str(plain)],
                cwd=repo,
                check=True,
                env=env,
                capture_output=True,
            )
            dirty(plain)
            force_remove = ["git", "worktree", "remove", "--force", str(plain)]
            note(
                "floor: git worktree remove --force + branch -D",
                timed(force_remove, repo, env, sync=True)
                + timed(["git", "branch", "-q", "-D", f"pf{n}"], repo, env, sync=True),
            )
            note(
                "laneboard discard --force (5 edited, 5 untracked)",
                timed([*LANEBOARD, "discard", forced, "--force"], repo, env, sync=True),
            )
            note(
                "floor: git worktree add (after a removal)",
                timed(
                    ["git", "worktree", "add", "-q", "-b", f"pr{n}", str(plain)],
                    repo,
                    env,
                    sync=True,
                ),
            )
            subprocess.run(["git", "worktree", "remove", str(plain)], cwd=repo, check=True)
            note("laneboard restore", timed([*LANEBOARD, "restore", forced], repo, env, sync=True))
            assert (repo / ".worktrees" / forced / "notes-0.md").read_text() == "untracked 0\n"
            assert not worktree.exists()

    median = {name: statistics.median(values) for name, values in figures.items()}
    pairs = [
        ("laneboard new", "floor: git worktree add -b"),
        ("laneboard discard (clean)", "floor: git worktree remove + branch -D"),
        (
            "laneboard discard --force (5 edited, 5 untracked)",
            "floor: git worktree remove --force + branch -D",
        ),
        ("laneboard restore", "floor: git worktree add (after a removal)"),
    ]
    for ours, floor in pairs:
        print(
            f"{ours:<52} {median[ours]:6.2f} s   {floor:<48} {median[floor]:6.2f} s   "
            f"{median[ours] / median[floor]:4.2f}x"
        )


if __name__ == "__main__":
    main()
