"""Benchmark of the board (run by hand; figures in docs/board.md).

    .venv/bin/python bench/board.py [--tasks 50] [--live 20] [--files 5000] [--idle 30]
                                    [--runs 20] [--big 200] [--big-repos 5]

In a throwaway repository of FILES files, `LANEBOARD_HOME` and private tmux servers, with the
fake Claude Code of the tests as every agent: TASKS tasks, LIVE of them with a live pane (all
but two busy printing a status line every 0.3 s, as Claude does; those two idle, for the hook
test). The board runs as a real `laneboard` process in a 200x120 tmux pane, and what it shows
is read back with `capture-pane`:
- launch to first full paint: from starting the process to every task's row on the screen
  (floor: `python -c pass`, and `laneboard ls`, which reads the same ledger and worktrees);
- CPU over IDLE seconds with nobody at the keys (utime + stime of the board and the children
  it waited for, from /proc), as % of one core, and peak RSS (VmHWM);
- a file written in a worktree -> its row shows the new untracked count, median and p95;
- a hook event (`PermissionRequest` through the hook script Claude runs) -> the row says
  `waiting`, and `Stop` -> `idle`, median and p95;
- key press -> screen updated, with BIG more tasks over BIG_REPOS more repositories: a `Down`
  or `Up` sent with `tmux send-keys` until `capture-pane -e` shows the cursor's colours on the
  next row, median and p95 (floor: one `capture-pane -e`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import isolated_env, timed

ROOT = Path(__file__).resolve().parent.parent
FAKE = [sys.executable, str(ROOT / "tests" / "fakes" / "claude.py")]
LANEBOARD = [sys.executable, "-m", "laneboard"]
TICKS = os.sysconf("SC_CLK_TCK")


def ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
    return f"median {statistics.median(values) * 1000:6.1f} ms, p95 {p95 * 1000:6.1f} ms"


def make_repo(path: Path, files: int, env: dict[str, str]) -> None:
    path.mkdir(parents=True)
    for n in range(files):
        folder = path / f"d{n % 50}"
        folder.mkdir(exist_ok=True)
        (folder / f"f{n}.txt").write_text(f"file {n}\n" * 5)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)


def laneboard(env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [*LANEBOARD, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"laneboard {' '.join(args)} failed: {done.stderr}")
    return done.stdout


class Screen:
    """The board's tmux pane."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def text(self) -> str:
        return subprocess.run(
            ["tmux", "-L", self.socket, "capture-pane", "-p", "-t", "ui"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout

    def row(self, name: str) -> str:
        for line in self.text().splitlines():
            if re.match(rf"^. {re.escape(name)} ", line):
                return line
        return ""

    def until(self, check, what: str, deadline: float = 30.0) -> float:  # type: ignore[no-untyped-def]
        began = time.perf_counter()
        while not check():
            if time.perf_counter() - began > deadline:
                raise SystemExit(f"{what}: not within {deadline}s:\n{self.text()}")
            time.sleep(0.005)
        return time.perf_counter() - began


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / TICKS  # utime stime cutime cstime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--live", type=int, default=20)
    parser.add_argument("--files", type=int, default=5000)
    parser.add_argument("--idle", type=float, default=30.0)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--big", type=int, default=200)
    parser.add_argument("--big-repos", type=int, default=5)
    parser.add_argument("--only-keys", action="store_true", help="skip the 50-task part")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        env = isolated_env(base, ROOT)
        env = {k: v for k, v in env.items() if not k.startswith("TMUX")}
        agents, ui = f"lb-bench-agents-{os.getpid()}", f"lb-bench-ui-{os.getpid()}"
        env["LANEBOARD_TMUX_SOCKET"] = agents
        home = Path(env["LANEBOARD_HOME"])
        home.mkdir()
        (home / "config.toml").write_text(
            f"[agents]\nmax_running = {args.live + 5}\n"
            f"[agents.profiles.claude]\ncommand = {json.dumps(FAKE)}\n"
            "[board]\nbell = false\n"
        )
        try:
            if not args.only_keys:
                live_board(args, base, env, agents, ui)
            keys(args, base, env, ui)
        finally:
            for socket in (agents, ui):
                subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True)


def live_board(
    args: argparse.Namespace, base: Path, env: dict[str, str], agents: str, ui: str
) -> None:
    repo = base / "repo"
    make_repo(repo, args.files, env)
    names = [f"t{n:02d}" for n in range(args.tasks)]
    for n, name in enumerate(names):
        if n < args.live - 2:
            laneboard(env, repo, "new", name, "--prompt", "work 3600")
        elif n < args.live:
            laneboard(env, repo, "new", name)
        else:
            laneboard(env, repo, "new", name, "--no-start")
    print(f"{os.cpu_count()} cores; {args.tasks} tasks, {args.live} live panes, {args.files} files")
    floor = statistics.median(timed([sys.executable, "-c", "pass"], repo, env) for _ in range(5))
    ls = statistics.median(timed([*LANEBOARD, "ls"], repo, env) for _ in range(3))
    screen = Screen(ui)
    began = time.perf_counter()
    start_board(base, repo, env, ui, 200, 120)
    screen.until(lambda: all(screen.row(name) for name in names), "every row")
    first = time.perf_counter() - began
    pid = int(
        subprocess.run(
            ["tmux", "-L", ui, "display-message", "-p", "-t", "ui", "#{pane_pid}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    screen.until(lambda: "…" not in screen.row(names[-1]), "git states")
    print(f"first full paint                 {first * 1000:6.0f} ms")
    print(f"floor: python -c pass            {floor * 1000:6.0f} ms")
    print(f"floor: laneboard ls              {ls * 1000:6.0f} ms")

    time.sleep(3)
    before, at = cpu_seconds(pid), time.perf_counter()
    time.sleep(args.idle)
    used = (cpu_seconds(pid) - before) / (time.perf_counter() - at)
    print(f"CPU over {args.idle:.0f} s, nobody at the keys   {used * 100:5.2f} % of one core")

    quiet = names[-1]
    writes = []
    for n in range(1, args.runs + 1):
        path = repo / ".worktrees" / quiet / f"new{n}.txt"
        began = time.perf_counter()
        path.write_text("x\n")
        screen.until(lambda n=n: f"?{n} " in screen.row(quiet), "the untracked count")
        writes.append(time.perf_counter() - began)
    print(f"file write -> row shows it       {ms(writes)}")

    hooked = names[args.live - 1]
    task_id = json.loads(laneboard(env, repo, "show", hooked, "--json"))["id"]
    hook = Path(env["LANEBOARD_HOME"]) / "hooks" / "event.sh"
    events = {**env, "LANEBOARD_EVENTS": str(Path(env["LANEBOARD_HOME"]) / "events" /
                                             f"{task_id}.log")}  # fmt: skip
    payload = json.dumps({"session_id": "x" * 36, "hook_event_name": "x"})
    hooks = []
    for _ in range(args.runs):
        for event, shown in (("PermissionRequest", "waiting"), ("Stop", "idle")):
            began = time.perf_counter()
            subprocess.run(["sh", str(hook), event, "stdin"], input=payload, env=events,
                           text=True, check=True)  # fmt: skip
            screen.until(lambda s=shown: f" {s} " in screen.row(hooked), f"the row says {shown}")
            hooks.append(time.perf_counter() - began)
    print(f"hook event -> row shows it       {ms(hooks)}")
    print(f"peak RSS of the board            {peak_rss_mb(pid):6.1f} MB")
    subprocess.run(["tmux", "-L", ui, "send-keys", "-t", "ui", "q"], check=True)
    time.sleep(1)


def keys(args: argparse.Namespace, base: Path, env: dict[str, str], ui: str) -> None:
    """Key press -> the cursor drawn on the next row, with BIG more tasks over BIG_REPOS more
    repositories, in a real board process: `send-keys`, then `capture-pane -e` until the
    cursor's colours are on the next line."""
    per = args.big // args.big_repos
    for r in range(args.big_repos):
        repo = base / f"big{r}"
        make_repo(repo, 200, env)
        for n in range(per):
            laneboard(env, repo, "new", f"k{r}{n:03d}", "--no-start")
    start_board(base, base / "big0", env, ui, 160, 50)
    screen = Screen(ui)
    screen.until(lambda: re.search(r"^. k\d", screen.text(), re.M), "the rows", 60)
    screen.until(
        lambda: not re.search(r"^. k\S+ .*  …  ", screen.text(), re.M), "the first full read", 120
    )
    time.sleep(2)

    def lines() -> list[str]:
        return subprocess.run(
            ["tmux", "-L", ui, "capture-pane", "-e", "-p", "-t", "ui"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.splitlines()

    def cursor_at() -> int:
        """The row the cursor is drawn on: the line that starts with the default theme's
        cursor background (laneboard-dark's primary, #5FA8D3, as tmux passes it on)."""
        for index, line in enumerate(lines()[2:]):
            if re.search(r"48;(5;74|2;95;168;211)m", line[:48]):
                return index
        return -1

    if cursor_at() < 0:
        raise SystemExit("no cursor on the screen:\n" + "\n".join(map(repr, lines()[:6])))
    took: list[float] = []
    for n in range(args.runs * 2):
        key, step = ("Down", 1) if n % 20 < 10 else ("Up", -1)
        before = cursor_at()
        began = time.perf_counter()
        subprocess.run(["tmux", "-L", ui, "send-keys", "-t", "ui", key], check=True)
        screen.until(
            lambda b=before, s=step: cursor_at() == b + s, f"the cursor moved from row {before}"
        )
        took.append(time.perf_counter() - began)
    floor = [timed(["tmux", "-L", ui, "capture-pane", "-e", "-p", "-t", "ui"], base, env)
             for _ in range(10)]  # fmt: skip
    print(f"key -> cursor drawn, +{args.big} tasks in {args.big_repos} repos  {ms(took)}")
    print(f"floor: one capture-pane -e       {ms(floor)}")
    subprocess.run(["tmux", "-L", ui, "kill-server"], capture_output=True)


def start_board(
    base: Path, repo: Path, env: dict[str, str], ui: str, width: int, height: int
) -> None:
    """The board as a real process in a fresh tmux server `ui`, in `repo`, with `env`."""
    subprocess.run(["tmux", "-L", ui, "kill-server"], capture_output=True)
    script = base / "board.sh"  # the board's environment, as the operator's shell has it
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script.write_text(
        f"{exports}export TERM=xterm-256color\n"  # as a terminal with 256 colours says
        f"cd {shlex.quote(str(repo))}\nexec {shlex.join(LANEBOARD)}\n"
    )
    subprocess.run(
        ["tmux", "-L", ui, "new-session", "-d", "-s", "ui", "-x", str(width), "-y", str(height),
         "sh", str(script)],
        env=env,
        check=True,
    )  # fmt: skip


if __name__ == "__main__":
    main()
