"""Benchmark of the agent runtime (run by hand; figures in docs/agents.md).

    .venv/bin/python bench/agents.py [--panes 50] [--runs 20]

In a throwaway repository, `LANEBOARD_HOME` and a private tmux server, with the fake Claude Code
of the tests as the agent:
- one refresh for PANES live panes: `list-panes -a` plus one chained capture of every screen,
  as `observe_all` does, against one bare `tmux list-panes -a` process (the floor);
- the hook's cost to the agent per event (`event.sh` with a JSON payload on stdin, as Claude
  runs it), against `sh -c :` (the floor);
- hook event -> state visible: the time from a hook writing `PermissionRequest` to
  `laneboard show --json` reporting `waiting` (a new process each time, as a script sees it),
  and to the in-process read the controller and board make, median and p95;
- `laneboard new` with the agent started against `new --no-start`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import timed

ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(ROOT / "tests" / "fakes" / "claude.py")]
LANEBOARD = [sys.executable, "-m", "laneboard"]


def ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values) * 1000:6.1f} ms, p95 {p95 * 1000:6.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--panes", type=int, default=50)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        repo, home = base / "repo", base / "lbhome"
        repo.mkdir()
        home.mkdir()
        socket = f"lb-bench-{os.getpid()}"
        env = {key: value for key, value in os.environ.items() if not key.startswith("TMUX")}
        env.update(
            HOME=str(base),
            LANEBOARD_HOME=str(home),
            LANEBOARD_TMUX_SOCKET=socket,
            GIT_AUTHOR_NAME="b",
            GIT_AUTHOR_EMAIL="b@b",
            GIT_COMMITTER_NAME="b",
            GIT_COMMITTER_EMAIL="b@b",
        )
        (home / "config.toml").write_text(
            f"[agents]\nmax_running = {args.panes + 10}\n"
            f"[agents.profiles.claude]\ncommand = {json.dumps(FAKE)}\n"
        )
        (repo / "f.txt").write_text("x\n")
        for git_args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
            subprocess.run(["git", *git_args], cwd=repo, check=True, env=env)
        try:
            _run(args, repo, env, socket)
        finally:
            subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def _run(args: argparse.Namespace, repo: Path, env: dict[str, str], socket: str) -> None:
    new_start = [timed([*LANEBOARD, "new", f"t{n}"], repo, env) for n in range(args.panes)]
    new_bare = [timed([*LANEBOARD, "new", f"b{n}", "--no-start"], repo, env) for n in range(10)]
    print(f"{os.cpu_count()} cores; {args.panes} live panes")
    print(f"laneboard new (agent started)   {ms(new_start)}")
    print(f"laneboard new --no-start        {ms(new_bare)}")

    os.environ.update(env)
    from laneboard.core.domain.runtime import PaneRef
    from laneboard.sessions.tmux import TmuxRuntime

    runtime = TmuxRuntime(socket)
    floor, refresh = [], []
    for _ in range(args.runs):
        floor.append(timed(["tmux", "-L", socket, "list-panes", "-a"], repo, env))
        began = time.perf_counter()
        panes = runtime.snapshot()
        runtime.capture_many([PaneRef(pane) for pane in panes], 40)
        refresh.append(time.perf_counter() - began)
    print(f"one refresh, {len(panes)} panes (2 tmux calls)  {ms(refresh)}")
    print(f"floor: one `tmux list-panes -a`  {ms(floor)}")

    script = home_of(env) / "hooks" / "event.sh"
    payload = json.dumps(
        {
            "session_id": "x" * 36,
            "hook_event_name": "PreToolUse",
            "tool_input": {"command": "make test"},
        },
        separators=(",", ":"),
    )
    hook_env = {**env, "LANEBOARD_EVENTS": str(home_of(env) / "events" / "bench.log")}
    hook = [
        timed(["sh", str(script), "PreToolUse", "stdin"], repo, hook_env, stdin=payload)
        for _ in range(args.runs * 5)
    ]
    shell = [timed(["sh", "-c", ":"], repo, hook_env) for _ in range(args.runs * 5)]
    print(f"hook per event                  {ms(hook)}")
    print(f"floor: `sh -c :`                {ms(shell)}")

    from laneboard.core.service.app import Service

    service = Service(runtime=runtime)
    task = service.task(repo, "t0", facts=False).task
    events = {**env, "LANEBOARD_EVENTS": str(home_of(env) / "events" / f"{task.id}.log")}
    to_show, to_read = [], []
    for _ in range(args.runs):
        for name, sink in (("Stop", None), ("PermissionRequest", to_show)):
            subprocess.run(
                ["sh", str(script), name, "stdin"],
                input=payload,
                env=events,
                capture_output=True,
                text=True,
            )
            if sink is None:
                continue
            began = time.perf_counter()
            while True:
                out = subprocess.run(
                    [*LANEBOARD, "show", "t0", "--json"],
                    cwd=repo,
                    env=env,
                    capture_output=True,
                    text=True,
                ).stdout
                if json.loads(out)["agent"]["state"] == "waiting":
                    break
            sink.append(time.perf_counter() - began)
        subprocess.run(["sh", str(script), "Stop", "stdin"], input=payload, env=events, text=True)
        began = time.perf_counter()
        subprocess.run(
            ["sh", str(script), "PermissionRequest", "stdin"], input=payload, env=events, text=True
        )
        while str(service.agent_state(service.task(repo, "t0", facts=False).task)) != "waiting":
            pass
        to_read.append(time.perf_counter() - began)
    print(f"hook -> `laneboard show` says waiting   {ms(to_show)}")
    print(f"hook -> in-process read says waiting   {ms(to_read)}")


def home_of(env: dict[str, str]) -> Path:
    return Path(env["LANEBOARD_HOME"])


if __name__ == "__main__":
    main()
