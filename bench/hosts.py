"""Benchmark of hosts over ssh (run by hand; figures in docs/hosts.md).

    .venv/bin/python bench/hosts.py [--hosts 3] [--tasks 20] [--poll-seconds 30]

Starts HOSTS sshd servers on the loopback address (as the tests do: `tests/sshd.py`, keys and
ssh config in a temporary directory), each serving a laneboard with its own state, with TASKS
running tasks (`--cmd 'sleep …'` agents in the host's tmux), and TASKS local tasks here. Then
measures: `ls` of the local tasks alone; `ls` of everything (local and every host's, asked of
all hosts at once) with the masters up and from cold (connections opened); one host's
`ls --json` on the host itself and over ssh, and an ssh round trip (`true`) over the master;
the CPU one `ls --json` costs on a host (what each look of the board costs it), and what the
board's poll of every host (one `ls --json` per host every 2 s) costs here (this process and its
ssh clients);
how long a state change on a host takes to show (one poll round trip after the change).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The checkout instead of bench/ (whose queue.py would hide the standard library's `queue`).
sys.path[0] = str(ROOT)

from tests.sshd import Remote, Sshd  # noqa: E402

LANEBOARD = [sys.executable, "-m", "laneboard"]


def must(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed: {done.stderr}")
    return done.stdout


def make_repo(path: Path, env: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    must(["git", "init", "-q", "-b", "main"], path, env)
    (path / "README.md").write_text("bench\n")
    must(["git", "add", "-A"], path, env)
    must(["git", "commit", "-q", "-m", "init"], path, env)
    return path


def median_time(args: list[str], cwd: Path, env: dict[str, str], runs: int = 7) -> float:
    took = []
    for _ in range(runs):
        began = time.perf_counter()
        must(args, cwd, env)
        took.append(time.perf_counter() - began)
    return statistics.median(took)


def cpu_of(pid: int, children: bool = True) -> float:
    """Seconds of CPU process `pid` used (with its reaped children's), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = sum(int(f) for f in fields[11 : 15 if children else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def ssh_clients() -> list[int]:
    """This process's ssh children (the streams' clients)."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and (entry / "comm").read_text().strip() == "ssh":
            found.append(int(entry.name))
    return found


def streaming(service: Any, remotes: list[Remote], base: Path, given: Any) -> None:
    """The board's way since streaming: one `ls --json --follow` per host, changes only."""
    import threading

    latest: dict[str, Any] = {}
    changed = threading.Condition()
    stop = threading.Event()

    def post(answer: Any) -> None:
        with changed:
            latest[answer.host.name] = answer
            changed.notify_all()

    def until(check: Any, limit: float = 120.0) -> float:
        end = time.perf_counter() + limit
        with changed:
            while not check():
                if not changed.wait(max(0.0, end - time.perf_counter())):
                    raise SystemExit("the streams did not show it in time")
        return time.perf_counter()

    began = time.perf_counter()
    hosts = service.hosts()
    threads = [
        threading.Thread(target=service.watch_host, args=(h, post, stop), daemon=True)
        for h in hosts
    ]
    for thread in threads:
        thread.start()

    def full() -> bool:
        return len(latest) == len(hosts) and all(
            a.reachable
            and len(a.tasks) == given.tasks
            and all(t.document.get("git") for t in a.tasks)
            for a in latest.values()
        )

    seen = until(full)
    print(
        f"streaming: first full view ({len(hosts)} hosts x {given.tasks} tasks, every git state): "
        f"{(seen - began) * 1000:.0f} ms"
    )
    time.sleep(5.0)  # the hosts' first reads settle
    pids = {r.lbhome: r.followers() for r in remotes}
    clients = ssh_clients()
    here0 = resource.getrusage(resource.RUSAGE_SELF)
    there0 = {k: sum(cpu_of(p) for p in v) for k, v in pids.items()}
    ssh0 = sum(cpu_of(p, children=False) for p in clients)
    wall0 = time.perf_counter()
    time.sleep(given.poll_seconds)
    wall = time.perf_counter() - wall0
    here1 = resource.getrusage(resource.RUSAGE_SELF)
    there1 = {k: sum(cpu_of(p) for p in v) for k, v in pids.items()}
    ssh1 = sum(cpu_of(p, children=False) for p in clients)
    here = here1.ru_utime - here0.ru_utime + here1.ru_stime - here0.ru_stime + ssh1 - ssh0
    per_host = [(there1[k] - there0[k]) / wall * 100 for k in pids]
    print(
        f"streaming, idle for {wall:.0f} s: here {here / wall * 100:.2f} % of a core (this "
        f"process and its {len(clients)} ssh clients); on each host "
        + ", ".join(f"{c:.2f} %" for c in per_host)
        + f" (its follower, {given.tasks} running tasks: a tmux look per tick)"
    )
    delays = []
    repo = base / "host0" / "repo"
    for n in range(6):
        name = f"t{3 + n % 3}"  # (t0 was paused and resumed above: it may wait for a slot)
        verb, wanted = ("pause", "paused") if n < 3 else ("resume", "running")
        done = remotes[0].laneboard("--repo", str(repo), verb, name)
        if done.code != 0:
            raise SystemExit(done.err)
        made = time.perf_counter()

        def shown(name: str = name, wanted: str = wanted, verb: str = verb) -> bool:
            answer = latest.get("h0")
            return answer is not None and any(
                t.name == name and (t.state == wanted or (verb == "resume" and t.state == "queued"))
                for t in answer.tasks
            )

        delays.append(until(shown) - made)
    print(
        f"streaming: a state change on a host, from its command's end to the answer that shows "
        f"it: median {statistics.median(delays) * 1000:.0f} ms, worst {max(delays) * 1000:.0f} ms "
        f"(of {len(delays)})"
    )
    stop.set()
    for thread in threads:
        thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--poll-seconds", type=float, default=30.0)
    given = parser.parse_args()

    base = Path(tempfile.mkdtemp(prefix="lb-bench-hosts-"))
    local = base / "local"
    (local / "home").mkdir(parents=True)
    (local / "gitconfig").write_text("[user]\n\tname = b\n\temail = b@b\n")
    env = {
        **os.environ,
        "HOME": str(local / "home"),
        "LANEBOARD_HOME": str(local / "lbhome"),
        "LANEBOARD_TMUX_SOCKET": f"lb-bench-local-{os.getpid()}",
        "GIT_CONFIG_GLOBAL": str(local / "gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTHONPATH": str(ROOT),
    }
    servers: list[Sshd] = []
    remotes: list[Remote] = []
    try:
        here = make_repo(local / "repo", env)
        for n in range(given.tasks):
            must([*LANEBOARD, "new", f"t{n}", "--cmd", "sleep 100000"], here, env)
        for i in range(given.hosts):
            sshd = Sshd(base / f"sshd{i}")
            sshd.start()
            servers.append(sshd)
            remote = Remote(base / f"host{i}", sshd)
            remotes.append(remote)
            there = make_repo(base / f"host{i}" / "repo", {**os.environ, **remote.env})
            for n in range(given.tasks):
                done = remote.laneboard(
                    "--repo", str(there), "new", f"t{n}", "--cmd", "sleep 100000"
                )
                if done.code != 0:
                    raise SystemExit(done.err)
            must(
                [
                    *LANEBOARD,
                    "host",
                    "add",
                    f"h{i}",
                    "remote",
                    "--ssh-config",
                    str(sshd.config),
                    "--laneboard",
                    str(remote.wrapper),
                ],
                base,
                env,
            )
        total = given.tasks * (given.hosts + 1)
        print(f"{given.hosts} hosts x {given.tasks} running tasks, {given.tasks} local tasks")
        print(
            f"ls in the local repository ({given.tasks} tasks): "
            f"{median_time([*LANEBOARD, 'ls'], here, env) * 1000:.0f} ms"
        )
        print(
            f"ls --local outside a repository ({given.tasks} tasks): "
            f"{median_time([*LANEBOARD, 'ls', '--local'], base, env) * 1000:.0f} ms"
        )
        must([*LANEBOARD, "ls"], base, env)  # masters up
        print(
            f"ls of everything, masters up ({total} tasks): "
            f"{median_time([*LANEBOARD, 'ls'], base, env) * 1000:.0f} ms"
        )

        os.environ.update({k: env[k] for k in ("HOME", "LANEBOARD_HOME", "GIT_CONFIG_GLOBAL")})
        from laneboard.core.service.app import Service

        service = Service()
        cold = []
        for _ in range(3):
            for host in service.hosts():
                service.connection(host).close()
            began = time.perf_counter()
            must([*LANEBOARD, "ls"], base, env)
            cold.append(time.perf_counter() - began)
        print(
            f"ls of everything from cold (3 connections opened): "
            f"{statistics.median(cold) * 1000:.0f} ms"
        )

        first = service.hosts()[0]
        connection = service.connection(first)
        connection.open()
        trips = []
        for _ in range(10):
            began = time.perf_counter()
            connection.run_shell("true")
            trips.append(time.perf_counter() - began)
        print(
            f"ssh round trip over the master (`true`, the host's shell start included): "
            f"{statistics.median(trips) * 1000:.0f} ms"
        )
        kids_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        direct = median_time([str(remotes[0].wrapper), "ls", "--json"], remotes[0].home, env)
        kids_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        ls_cpu = (
            kids_after.ru_utime - kids_before.ru_utime + kids_after.ru_stime - kids_before.ru_stime
        ) / 7
        over = []
        for _ in range(7):
            began = time.perf_counter()
            connection.run(["ls", "--local", "--json"])
            over.append(time.perf_counter() - began)
        print(
            f"one host's ls --json ({given.tasks} tasks): on the host {direct * 1000:.0f} ms, "
            f"over ssh {statistics.median(over) * 1000:.0f} ms"
        )
        size = len(connection.run(["ls", "--local", "--json"]).stdout)
        print(f"one host's answer: {size / 1024:.1f} KiB")
        print(
            f"CPU of one ls --json on a host ({given.tasks} tasks, git and tmux included): "
            f"{ls_cpu * 1000:.0f} ms, so polling every 2 s costs each host "
            f"{ls_cpu / 2 * 100:.0f} % of a core"
        )

        began_wall = time.perf_counter()
        self0 = resource.getrusage(resource.RUSAGE_SELF)
        kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        polls = 0
        while time.perf_counter() - began_wall < given.poll_seconds:
            tick = time.perf_counter()
            service.host_tasks()
            polls += 1
            time.sleep(max(0.0, 2.0 - (time.perf_counter() - tick)))
        wall = time.perf_counter() - began_wall
        self1 = resource.getrusage(resource.RUSAGE_SELF)
        kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        here_cpu = (
            self1.ru_utime
            - self0.ru_utime
            + self1.ru_stime
            - self0.ru_stime
            + kids1.ru_utime
            - kids0.ru_utime
            + kids1.ru_stime
            - kids0.ru_stime
        )
        print(
            f"polling every 2 s for {wall:.0f} s ({polls} polls of {given.hosts} hosts): "
            f"here {here_cpu / wall * 100:.1f} % of a core (this process and its ssh clients)"
        )

        began = time.perf_counter()
        remotes[0].laneboard("--repo", str(base / "host0" / "repo"), "pause", "t0")
        changed = time.perf_counter()
        answers = service.host_tasks()
        seen = time.perf_counter()
        state = next(t.state for t in answers[0].tasks if t.name == "t0")
        print(
            f"polling: a state change on a host ({state}) shows after one poll: "
            f"{(seen - changed) * 1000:.0f} ms after it "
            f"(pause itself took {(changed - began) * 1000:.0f} ms); the board "
            f"polls every 2 s, so on average 1 s + that"
        )
        remotes[0].laneboard("--repo", str(base / "host0" / "repo"), "resume", "t0")
        streaming(service, remotes, base, given)
    finally:
        subprocess.run(
            ["tmux", "-L", env["LANEBOARD_TMUX_SOCKET"], "kill-server"],
            capture_output=True,
            check=False,
        )
        for remote in remotes:
            remote.close()
        for sshd in servers:
            sshd.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
