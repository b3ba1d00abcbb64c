"""Benchmark of confinement (run by hand; figures in docs/confine.md).

    .venv/bin/python bench/confine.py [--files 5000] [--runs 20]

In a throwaway repository of FILES files with two tasks, each figure beside its floor in the
same loop, medians of RUNS:
- `laneboard exec --lane a -- true`, confined (`[confine] mode = "auto"`, bwrap works) against
  `mode = "off"`, alternating;
- an agent's launch, end to end: `laneboard start a --cmd true` on a private tmux server until
  the pane is dead (the warden: channel, object watcher, bwrap, the agent), confined against
  `mode = "off"`;
- the sandbox alone: the bwrap argv of a task running `true`, against plain `true`;
- a commit inside against outside: a loop of RUNS commits in the task's worktree, inside one
  sandbox (its start taken off) and outside it, per commit; and the verified move of what the
  commits inside wrote into the common store, per object.
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

from common import isolated_env, timed

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LANEBOARD = [sys.executable, "-P", "-m", "laneboard"]


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def launch(repo: Path, env: dict[str, str], socket: str) -> float:
    """Seconds from `laneboard start a --cmd true` to its pane being dead."""
    began = time.perf_counter()
    timed([*LANEBOARD, "start", "a", "--cmd", "true"], repo, env)
    while True:
        dead = subprocess.run(
            ["tmux", "-L", socket, "list-panes", "-a", "-F", "#{pane_dead}"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if dead and all(d == "1" for d in dead):
            took = time.perf_counter() - began
            timed([*LANEBOARD, "retain", "a"], repo, env)  # retained: startable again
            return took
        time.sleep(0.002)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo = base / "repo"
        repo.mkdir()
        env = isolated_env(base, ROOT)
        socket = f"lb-bench-{os.getpid()}"
        env["LANEBOARD_TMUX_SOCKET"] = socket
        os.environ.update(env)
        from laneboard.core.adapters import confine, taskobjects
        from laneboard.core.adapters.config import state_dir
        from laneboard.core.adapters.db import Database, default_path
        from laneboard.core.operations.steps import confinement

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
        confined, unconfined, boxed_launch, bare_launch = [], [], [], []
        try:
            for _ in range(args.runs):
                config.write_text('[confine]\nmode = "auto"\n')
                confined.append(timed([*LANEBOARD, "exec", "--lane", "a", "--", "true"], repo, env))
                boxed_launch.append(launch(repo, env, socket))
                config.write_text('[confine]\nmode = "off"\n')
                unconfined.append(
                    timed([*LANEBOARD, "exec", "--quiet", "--lane", "a", "--", "true"], repo, env)
                )
                bare_launch.append(launch(repo, env, socket))
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
        config.write_text('[confine]\nmode = "auto"\n')

        database = Database(default_path())
        task_id = database.conn.execute("SELECT id FROM tasks WHERE name = 'a'").fetchone()[0]
        admin = (worktree / ".git").read_text().split("worktrees/")[-1].strip()
        box = confinement.sandbox(
            "auto", database, common_dir=repo / ".git", worktree=worktree, admin_name=admin,
            task_id=task_id, task_name="a", branch="lb/a/work", channel=None,
        )  # fmt: skip
        assert box.layout is not None and box.bwrap is not None, box.decision
        inner = confine.environment(
            box.layout, dict(env), common_dir=repo / ".git", task_id=task_id, state=state_dir()
        )
        settled = confine.environment(
            box.layout, dict(env), common_dir=repo / ".git", task_id=task_id, state=state_dir(),
            settled=True,
        )  # fmt: skip

        def boxed(argv: list[str]) -> list[str]:
            return confine.bwrap_argv(str(box.bwrap), box.layout, argv, cwd=str(worktree))

        bare = [timed(["true"], worktree, env) for _ in range(args.runs)]
        sandbox = [timed(boxed(["true"]), worktree, inner) for _ in range(args.runs)]
        start = statistics.median(sandbox) - statistics.median(bare)

        commit = "echo $i > n.txt && git add n.txt && git commit -q -m c$i"
        loop = f"for i in $(seq {args.runs}); do {commit}; done"
        outside, inside, watched = [], [], []
        count, moved = 0, 0.0
        assert box.objects is not None
        for _ in range(5):
            outside.append(timed(["sh", "-c", loop], worktree, env))
            # as a warden runs it: a watcher moving objects, each ref update waiting for it
            watcher = confinement.watcher(box, repo / ".git", 1, task_id).start()
            watched.append(timed(boxed(["sh", "-c", loop]), worktree, settled))
            watcher.stop()
            # without a watcher: what the commits wrote is moved after, and that is timed
            inside.append(timed(boxed(["sh", "-c", loop]), worktree, inner))
            began = time.perf_counter()
            count += taskobjects.move(box.objects, repo / ".git" / "objects").objects
            moved += time.perf_counter() - began
        database.close()

    print(f"{os.cpu_count()} cores; {args.files} files; medians of {args.runs}")
    print(f"exec --lane a -- true, confined   {ms(confined):7.1f} ms")
    print(f"exec --lane a -- true, mode off   {ms(unconfined):7.1f} ms")
    print(f"  ratio                           {ms(confined) / ms(unconfined):7.2f}x")
    print(f"agent launch to exit, confined    {ms(boxed_launch):7.1f} ms")
    print(f"agent launch to exit, mode off    {ms(bare_launch):7.1f} ms")
    print(f"  ratio                           {ms(boxed_launch) / ms(bare_launch):7.2f}x")
    print(f"sandbox running true              {ms(sandbox):7.1f} ms")
    print(f"true, plain                       {ms(bare):7.1f} ms")
    per_out = ms(outside) / args.runs
    per_in = (ms(inside) - start * 1000) / args.runs
    per_watched = (ms(watched) - start * 1000) / args.runs
    print(f"a commit, outside {per_out:6.2f} ms, inside {per_in:6.2f} ms ({per_in / per_out:.2f}x)")
    print(f"  inside, waiting for its move    {per_watched:6.2f} ms ({per_watched / per_out:.2f}x)")
    each = moved * 1e6 / max(count, 1)
    print(f"verified move of {count} objects: {moved * 1000:.1f} ms ({each:.0f} us each)")


if __name__ == "__main__":
    main()
