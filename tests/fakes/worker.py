"""A stand-in for a coding agent that works and delegates as a script says, for the delegation
tests: run as the `worker` profile (`worker.py -- PROMPT`, the way laneboard passes an `argv`
prompt) or by `--cmd` (the prompt typed into it), it runs the steps its prompt names and exits.

The prompt is steps separated by ` ;; ` (or ` ; ` when it has no ` ;; `, which is how a
coordinator nests a child's steps in a `spawn`):
  `write NAME TEXT`      write a file in the cwd
  `commit MESSAGE`       `git add -A` and commit
  `check NAME RESULT`    `laneboard signal --check NAME=RESULT`
  `say TEXT`             `laneboard signal --message TEXT`
  `spawn NAME STEPS`     `laneboard new NAME --agent worker --prompt STEPS` (no --parent: the
                         task comes from `LANEBOARD_TASK`, as in a real agent's shell)
  `wait FILE NAMES...`   `laneboard wait NAMES --json`, its document into FILE (and its exit
                         code into FILE.code)
  `mcp FILE NAME STEPS`  as an agent's MCP client does: start `laneboard mcp` in this worktree
                         with a bare environment (no `LANEBOARD_TASK`, no `TMUX`), `delegate`
                         NAME with STEPS, `wait` for it, write the wait's document into FILE
  `mcpcalls FILE JSON`   start `laneboard mcp` as `mcp` does and call each [tool, arguments]
                         of the JSON list, every result (or `{"error": ...}`) into FILE
  `run FILE ARGS...`     `laneboard ARGS` (split as a shell would), its exit code into FILE
  `sleep S`, `exit N`
Each step's laneboard output is printed, so the pane shows what happened.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

SELF = [sys.executable, os.path.abspath(__file__)]
PROFILE = f"[agents.profiles.worker]\ncommand = {json.dumps(SELF)}\n"
"""The config table that makes this worker the `worker` profile."""
LANEBOARD = [sys.executable, "-m", "laneboard"]


def laneboard(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*LANEBOARD, *args], capture_output=True, text=True, check=False)
    print(f"laneboard {' '.join(args[:2])}: exit {done.returncode}", flush=True)
    for line in (done.stdout + done.stderr).splitlines()[-5:]:
        print(f"  {line}", flush=True)
    return done


def step(words: str) -> int | None:
    command, _, rest = words.strip().partition(" ")
    if command == "write":
        name, _, text = rest.partition(" ")
        Path(name).write_text(text + "\n")
    elif command == "commit":
        for args in (["add", "-A"], ["commit", "-q", "-m", rest]):
            done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(f"git {args[0]}: {done.stderr.strip()}", flush=True)
                return 1
    elif command == "check":
        name, _, result = rest.partition(" ")
        laneboard("signal", "--check", f"{name}={result}")
    elif command == "say":
        laneboard("signal", "--message", rest)
    elif command == "spawn":
        name, _, steps = rest.partition(" ")
        laneboard("new", name, "--agent", "worker", "--prompt", steps)
    elif command == "wait":
        target, *names = rest.split()
        done = laneboard("wait", *names, "--json", "--timeout", "60")
        Path(target).write_text(done.stdout)
        Path(target + ".code").write_text(str(done.returncode))
    elif command == "mcp":
        target, name, steps = rest.split(" ", 2)
        import asyncio

        Path(target).write_text(json.dumps(asyncio.run(over_mcp(name, steps))))
    elif command == "mcpcalls":
        target, _, calls = rest.partition(" ")
        import asyncio

        Path(target).write_text(json.dumps(asyncio.run(mcp_calls(json.loads(calls)))))
    elif command == "run":
        target, _, words = rest.partition(" ")
        Path(target).write_text(str(laneboard(*shlex.split(words)).returncode))
    elif command == "sleep":
        time.sleep(float(rest))
    elif command == "exit":
        return int(rest or 0)
    return None


async def mcp_calls(calls: list[list[object]]) -> list[object]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    bare = {k: os.environ[k] for k in ("HOME", "PATH", "LANEBOARD_HOME") if k in os.environ}
    params = StdioServerParameters(command=LANEBOARD[0], args=[*LANEBOARD[1:], "mcp"], env=bare)
    found: list[object] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for tool, arguments in calls:
            result = await session.call_tool(str(tool), arguments)  # type: ignore[arg-type]
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
            found.append({"error": text} if result.isError else json.loads(text))
    return found


async def over_mcp(name: str, steps: str) -> dict[str, object]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    bare = {k: os.environ[k] for k in ("HOME", "PATH", "LANEBOARD_HOME") if k in os.environ}
    params = StdioServerParameters(command=LANEBOARD[0], args=[*LANEBOARD[1:], "mcp"], env=bare)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        found: dict[str, object] = {}
        for tool, arguments in (
            ("delegate", {"name": name, "prompt": steps, "agent": "worker"}),
            ("wait", {"names": [name], "timeout": 60}),
        ):
            result = await session.call_tool(tool, arguments)
            text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
            print(f"mcp {tool}: {'error' if result.isError else 'ok'} {text[:200]}", flush=True)
            found[tool] = json.loads(text) if not result.isError else {"error": text}
        return found


def main() -> int:
    print("worker ready", flush=True)
    given = sys.argv[sys.argv.index("--") + 1 :] if "--" in sys.argv else []
    line = " ".join(given) if given else sys.stdin.readline().strip()
    print(f"prompt: {line}", flush=True)
    separator = " ;; " if " ;; " in line else " ; "
    for words in line.split(separator):
        code = step(words)
        if code is not None:
            return code
    time.sleep(3600)  # stays at its prompt until stopped
    return 0


if __name__ == "__main__":
    sys.exit(main())
