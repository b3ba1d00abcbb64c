"""Benchmark of laneboard at 0, 50 and 200 tasks, each figure beside its floor measured in the
same loop (run by hand; figures in docs/board.md and docs/cli.md).

    .venv/bin/python bench/scale.py [--counts 0,50,200] [--repos 5] [--files 300] [--runs 10]
                                    [--idle 20] [--events 20] [--only board|cli|new]

In a throwaway `LANEBOARD_HOME`, git config and private tmux servers: REPOS repositories of
FILES files each, and one more task (`hk`, in the first repository) whose agent is the fake
Claude Code of the tests, idle, so hook events have a row to change. For each count, tasks are
added (`new --no-start`, spread evenly over the repositories) and then measured:

- `laneboard ls` of every repository (run outside any: all of them), CPU (user + system of it
  and the git processes it waits for) and wall, alternating with `python -c pass`; the ratio of
  the medians;
- `ls`, `show`, `lanes`, `verify` and `signal` while a board runs, alternating with
  `python -c pass` (the board is the controller, so `ls` and `show` may use the git states it
  keeps);
- the board as a real process in a tmux pane tall enough for every row: launch to every row's
  git state on the screen; CPU over IDLE seconds with nobody at the keys; CPU per hook event
  (EVENTS events, 2 a second, through the hook script Claude runs, the idle rate taken off:
  a working agent's tool calls, then turns that need the operator); hook event -> the row
  shows the agent's new state (median and worst); peak RSS.

Then, in a small repository of its own (`--only new`): `new --no-start` against
`git worktree add -b` of the same commit, and `restore` against `git worktree add` of the same
commit, alternating, CPU and wall.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import isolated_env

ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(ROOT / "tests" / "fakes" / "claude.py")]
LANEBOARD = [sys.executable, "-m", "laneboard"]
TICKS = os.sysconf("SC_CLK_TCK")
PASS = [sys.executable, "-c", "pass"]


def run(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds of `args` and every process it waited for, wall seconds, stdout); it must
    exit 0."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(args)} failed: {done.stderr}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return cpu, wall, done.stdout


def paired(
    what: dict[str, list[str]], cwd: Path, env: dict[str, str], runs: int
) -> dict[str, tuple[float, float]]:
    """Median (CPU, wall) of each command, run alternating `runs` times after one warm run."""
    for argv in what.values():
        run(argv, cwd, env)
    cpu: dict[str, list[float]] = {name: [] for name in what}
    wall: dict[str, list[float]] = {name: [] for name in what}
    for _ in range(runs):
        for name, argv in what.items():
            c, w, _ = run(argv, cwd, env)
            cpu[name].append(c)
            wall[name].append(w)
    return {name: (statistics.median(cpu[name]), statistics.median(wall[name])) for name in what}


def make_repo(path: Path, files: int, env: dict[str, str]) -> None:
    path.mkdir(parents=True)
    for n in range(files):
        folder = path / f"d{n % 20}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{n}.txt").write_text(f"file {n}\n" * 20)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)


def laneboard(env: dict[str, str], cwd: Path, *args: str) -> str:
    return run([*LANEBOARD, *args], cwd, env)[2]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def settle(pid: int, most: float = 90.0) -> None:
    """Wait until the board's first reads are over: under 2 % of a core over 3 s (at most
    `most` seconds; at 200 tasks its first full read takes several seconds of CPU)."""
    end = time.perf_counter() + most
    while time.perf_counter() < end:
        before = cpu_seconds(pid)
        time.sleep(3)
        if cpu_seconds(pid) - before < 0.06:
            return


class Board:
    """The board as a real process in tmux server `socket`, read back with `capture-pane`."""

    def __init__(
        self, socket: str, base: Path, cwd: Path, env: dict[str, str], rows: int, cols: int = 240
    ):
        self.socket = socket
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)
        script = base / "board.sh"
        exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        script.write_text(
            f"{exports}export TERM=xterm-256color\n"
            f"cd {shlex.quote(str(cwd))}\nexec {shlex.join(LANEBOARD)}\n"
        )
        self.began = time.perf_counter()
        subprocess.run(
            ["tmux", "-L", socket, "new-session", "-d", "-s", "ui", "-x", str(cols), "-y",
             str(rows), "sh", str(script)],
            env=env,
            check=True,
        )  # fmt: skip
        self.pid = int(self.tmux("display-message", "-p", "-t", "ui", "#{pane_pid}"))

    def tmux(self, *args: str) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=False
        ).stdout

    def text(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", "ui")

    def rows(self, names: list[str]) -> dict[str, str]:
        found = {}
        for line in self.text().splitlines():
            words = line[:30].split()
            for word in words[:2]:
                if word in names:
                    found[word] = line
        return found

    def until(self, check, what: str, deadline: float = 120.0) -> float:  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        while not check():
            if time.perf_counter() - began > deadline:
                raise SystemExit(f"{what}: not within {deadline}s:\n{self.text()}")
            time.sleep(0.01)
        return time.perf_counter() - began

    def quit(self) -> None:
        self.tmux("send-keys", "-t", "ui", "q")
        time.sleep(1)
        self.tmux("kill-server")


def measure_count(
    count: int, names: list[str], base: Path, env: dict[str, str], args: argparse.Namespace
) -> dict[str, str]:
    out: dict[str, str] = {}
    ls = paired({"pass": PASS, "ls": [*LANEBOARD, "ls"]}, base, env, args.runs)
    (pc, pw), (lc, lw) = ls["pass"], ls["ls"]
    out["ls"] = (
        f"ls CPU {lc * 1000:6.0f} ms ({lc / pc:4.1f}x python -c pass {pc * 1000:.0f} ms); "
        f"wall {lw * 1000:.0f} ms ({lw / pw:.1f}x)"
    )
    board = Board(f"lb-scale-ui-{os.getpid()}", base, base / "r0", env, 2 * len(names) + 60)
    tall = board
    try:
        board.until(lambda: len(board.rows(names)) == len(names), "every row")

        def states_shown() -> bool:
            rows = board.rows(names)
            return len(rows) == len(names) and not any(
                re.search(r"\s…\s", line) for line in rows.values()
            )

        board.until(states_shown, "every git state")
        shown = time.perf_counter() - board.began
        first_cpu = cpu_seconds(board.pid)
        out["board"] = (
            f"board: launch -> every row's git state {shown * 1000:6.0f} ms "
            f"(board CPU by then {first_cpu * 1000:.0f} ms; python -c pass {pw * 1000:.0f} ms)"
        )
    finally:
        tall.quit()
    # The rest in a terminal of the usual size (200x50): what the board repaints is what is on
    # the screen, so a pane tall enough for every row would make each repaint grow with them.
    board = Board(f"lb-scale-ui-{os.getpid()}", base, base / "r0", env, 50)
    try:
        board.until(lambda: " tasks in " in board.text(), "the board")
        settle(board.pid)
        before, at = cpu_seconds(board.pid), time.perf_counter()
        time.sleep(args.idle)
        idle = (cpu_seconds(board.pid) - before) / (time.perf_counter() - at)
        out["idle"] = f"board idle CPU over {args.idle:.0f} s {idle * 100:5.2f} % of one core"
        # The read commands while the board is the controller, beside their floor.
        hk = json.loads(laneboard(env, base / "r0", "show", "hk", "--json"))["id"]
        reads = {
            "ls": ["ls"],
            "show": ["show", "hk", "--repo", str(base / "r0")],
            "lanes": ["lanes"],
            "verify": ["verify", "hk", "--repo", str(base / "r0")],
            "signal": ["signal", "--task", hk, "--state", "working"],
        }
        timed = paired(
            {"pass": PASS, **{name: [*LANEBOARD, *argv] for name, argv in reads.items()}},
            base, env, args.runs,
        )  # fmt: skip
        pc, pw = timed["pass"]
        for name in reads:
            lc, lw = timed[name]
            out[f"{name}-board"] = (
                f"{name + ' with a board open:':<29} CPU {lc * 1000:6.0f} ms "
                f"({lc / pc:4.1f}x python -c pass {pc * 1000:.0f} ms); "
                f"wall {lw * 1000:.0f} ms ({lw / pw:.1f}x)"
            )
        out["hooks"] = hooks(board, base, env, args)
        out["rss"] = f"board peak RSS {peak_rss_mb(board.pid):6.1f} MB"
    finally:
        board.quit()
    return out


def hooks(board: Board, base: Path, env: dict[str, str], args: argparse.Namespace) -> str:
    """Board CPU per hook event, the idle rate taken off, for two kinds of events, EVENTS each,
    2 a second: a busy agent's tool calls (`PreToolUse`/`PostToolUse` while it works: nothing
    on the row changes, which is what most hook events are), then turns that need the operator
    (`PermissionRequest` then `Stop`: the row says waiting, then idle with a finished turn,
    each told with a notice), with the hook -> row latency of those."""
    task_id = json.loads(laneboard(env, base / "r0", "show", "hk", "--json"))["id"]
    home = Path(env["LANEBOARD_HOME"])
    events = {**env, "LANEBOARD_EVENTS": str(home / "events" / f"{task_id}.log")}
    payload = json.dumps({"session_id": "x" * 36, "hook_event_name": "x"})

    def fire(event: str) -> float:
        began = time.perf_counter()
        subprocess.run(
            ["sh", str(home / "hooks" / "event.sh"), event, "stdin"],
            input=payload, env=events, text=True, check=True,
        )  # fmt: skip
        return began

    def shows(state: str) -> bool:
        return f" {state} " in board.rows(["hk"]).get("hk", "")

    idle_before, at0 = cpu_seconds(board.pid), time.perf_counter()
    time.sleep(5)
    idle_rate = (cpu_seconds(board.pid) - idle_before) / (time.perf_counter() - at0)

    def spent_per_event(before: float, at: float) -> float:
        spent = cpu_seconds(board.pid) - before - idle_rate * (time.perf_counter() - at)
        return spent / args.events * 1000

    fire("UserPromptSubmit")  # working (its row is not on the screen: it needs nothing)
    time.sleep(1)
    settle(board.pid, 20)
    before, at = cpu_seconds(board.pid), time.perf_counter()
    for n in range(args.events):
        began = fire("PreToolUse" if n % 2 == 0 else "PostToolUse")
        time.sleep(max(0.0, 0.5 - (time.perf_counter() - began)))
    time.sleep(1.0)  # the last event's read
    tools = spent_per_event(before, at)
    took: list[float] = []
    before, at = cpu_seconds(board.pid), time.perf_counter()
    for n in range(args.events):
        event, shown = ("PermissionRequest", "waiting") if n % 2 == 0 else ("Stop", "idle")
        began = fire(event)
        board.until(lambda s=shown: shows(s), f"hk says {shown}", 30)
        took.append(time.perf_counter() - began)
        time.sleep(max(0.0, 0.5 - (time.perf_counter() - began)))
    turns = spent_per_event(before, at)
    return (
        f"board CPU per hook event: tool calls {tools:6.1f} ms; turns that need you "
        f"{turns:6.1f} ms, hook -> row median {statistics.median(took) * 1000:.0f} ms, "
        f"worst {max(took) * 1000:.0f} ms"
    )


def scale(base: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    repos = [base / f"r{n}" for n in range(args.repos)]
    for repo in repos:
        make_repo(repo, args.files, env)
    laneboard(env, repos[0], "new", "hk")  # the fake agent, idle: hook events change its row
    names = ["hk"]
    for count in args.counts:
        while len(names) - 1 < count:
            n = len(names) - 1
            repo = repos[n % len(repos)]
            name = f"r{n % len(repos)}t{n // len(repos):03d}"
            laneboard(env, repo, "new", name, "--no-start")
            names.append(name)
        print(f"--- {count} tasks (+ hk, the live one) in {len(repos)} repositories", flush=True)
        for line in measure_count(count, names, base, env, args).values():
            print("  " + line, flush=True)


def new_and_restore(base: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    env = {**env, "LANEBOARD_HOME": str(base / "small-home")}
    repo = base / "small"
    make_repo(repo, args.files, env)
    floor_dir = base / "floor"
    floor_dir.mkdir()
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    laneboard(env, repo, "new", "warm", "--no-start")
    cpu: dict[str, list[float]] = {k: [] for k in ("new", "add -b", "restore", "add", "python")}
    wall: dict[str, list[float]] = {k: [] for k in cpu}
    laneboard(env, repo, "new", "gone", "--no-start")
    (repo / ".worktrees" / "gone" / "notes.txt").write_text("kept in the snapshot\n")
    laneboard(env, repo, "discard", "gone", "--force")
    for n in range(args.runs):
        steps = {
            "new": [*LANEBOARD, "new", f"n{n}", "--no-start"],
            "add -b": ["git", "worktree", "add", "-q", "-b", f"fl{n}", str(floor_dir / f"a{n}"),
                       sha],
            "restore": [*LANEBOARD, "restore", "gone", "--as", f"g{n}"],
            "add": ["git", "worktree", "add", "-q", "--detach", str(floor_dir / f"d{n}"), sha],
            "python": [sys.executable, "-c", "pass"],
        }  # fmt: skip
        for name, argv in steps.items():
            c, w, _ = run(argv, repo, env)
            cpu[name].append(c)
            wall[name].append(w)
    med = {k: (statistics.median(cpu[k]), statistics.median(wall[k])) for k in cpu}
    print(f"--- new and restore, {args.files}-file repository, {args.runs} runs, medians")
    for mine, floor in (("new", "add -b"), ("restore", "add")):
        (mc, mw), (fc, fw) = med[mine], med[floor]
        print(
            f"  {mine:<8} CPU {mc * 1000:5.0f} ms vs git worktree {floor} {fc * 1000:4.0f} ms "
            f"({mc / fc:4.1f}x, +{(mc - fc) * 1000:.0f} ms); wall {mw * 1000:5.0f} ms vs "
            f"{fw * 1000:4.0f} ms ({mw / fw:4.1f}x, +{(mw - fw) * 1000:.0f} ms)"
        )
    py = med["python"][0]
    print(
        f"  python -c pass CPU {py * 1000:.0f} ms: the floor of any Python command, "
        f"{py / med['add'][0]:.1f}x git worktree add alone"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--counts", type=lambda s: [int(x) for x in s.split(",")], default=[0, 50, 200]
    )
    parser.add_argument("--repos", type=int, default=5)
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--idle", type=float, default=20.0)
    parser.add_argument("--events", type=int, default=20)
    parser.add_argument("--only", choices=("board", "new"))
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env = isolated_env(base, ROOT)
        env = {k: v for k, v in env.items() if not k.startswith("TMUX")}
        agents = f"lb-scale-agents-{os.getpid()}"
        env["LANEBOARD_TMUX_SOCKET"] = agents
        home = Path(env["LANEBOARD_HOME"])
        home.mkdir()
        (home / "config.toml").write_text(
            f"[agents.profiles.claude]\ncommand = {json.dumps(FAKE)}\n[board]\nbell = false\n"
        )
        try:
            if args.only != "new":
                scale(base, env, args)
            if args.only != "board":
                new_and_restore(base, env, args)
        finally:
            subprocess.run(["tmux", "-L", agents, "kill-server"], capture_output=True)


if __name__ == "__main__":
    main()
