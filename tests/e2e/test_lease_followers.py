"""A lease follows every process its command starts (DESIGN.md section 5b), across real
processes: a real `laneboard exec`, a real `setsid` child that leaves the command's process group
and session, and the lease's id in that child's environment.

Unconfined (`confine.mode = "off"`) unless said otherwise: a confined command's processes are one
PID namespace and end with it (`test_a_confined_setsid_child_ends_with_its_sandbox`). Every wait
is on an event (a FIFO, a pidfd, a line of output) with a generous deadline.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from laneboard.core.adapters import procs
from laneboard.core.adapters.db import Database, default_path
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.domain.lanes import MARKERS, Lease, LeaseState
from tests.conftest import REPO_ROOT
from tests.procs import AGENT, DEADLINE, Spawned

UNCONFINED = '[confine]\nmode = "off"\n'
LANEBOARD = f"PYTHONPATH={REPO_ROOT} {sys.executable} -P -m laneboard"


@pytest.fixture
def board(repo: Path, cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo with two provisioned tasks, `a` and `b`, and two slots; unconfined."""
    monkeypatch.setenv("LANEBOARD_SLOTS", "2")
    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
    (repo / ".laneboard.toml").write_text(UNCONFINED)
    return repo


@pytest.fixture
def spawn(board: Path) -> Iterator[Callable[..., Spawned]]:
    started: list[Spawned] = []

    def start(*args: str) -> Spawned:
        proc = Spawned(list(args), board)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Callable[[str], tuple[Path, int]]]:
    """`fifo(name)`: a FIFO and a descriptor on it held open read-write, so that a process
    opening it never blocks, and a reader here never sees end-of-file."""
    opened: list[int] = []

    def make(name: str) -> tuple[Path, int]:
        path = tmp_path / name
        os.mkfifo(path)
        fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
        opened.append(fd)
        return path, fd

    yield make
    for fd in opened:
        os.close(fd)


@pytest.fixture
def reap() -> Iterator[Callable[[int], int]]:
    """`reap(pid)` names a process the test makes; whatever of them is left is killed."""
    made: list[tuple[int, int | None]] = []

    def note(pid: int) -> int:
        made.append((pid, procs.start_time(pid)))
        return pid

    yield note
    for pid, start in made:
        if procs.alive(pid, start):
            os.kill(pid, signal.SIGKILL)


def _line(fd: int) -> str:
    """The next line written into the FIFO held by `fd`."""
    data = b""
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, f"nothing was written within {DEADLINE}s (so far {data!r})"
        data += os.read(fd, 4096)
    return data.decode().strip()


@contextmanager
def _exited(pid: int) -> Iterator[None]:
    """Run the block, then wait (on a pidfd) until process `pid` has exited."""
    fd = os.pidfd_open(pid)
    try:
        yield
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, f"process {pid} still runs after {DEADLINE}s"
    finally:
        os.close(fd)


def _store() -> LeaseStore:
    return LeaseStore(Database(default_path()), slots=2)


def _lease(seq: int) -> Lease:
    return _store().get(seq)


def _last_exec() -> Lease:
    return [x for x in _store().admitted_in_order() if x.kind.value == "exec"][-1]


def _setsid(inner: str) -> str:
    """A shell line that starts `inner` in a session of its own, on none of our stdio (so that
    the command's own output ends when it does), and does not wait for it."""
    return f"setsid sh -c {shlex.quote(inner)} </dev/null >/dev/null 2>&1 &"


def test_a_setsid_child_keeps_the_lane_until_it_exits(board: Path, cli, spawn, fifo, reap) -> None:
    """Was released at once: `exec --lane a -- sh -c 'setsid sh -c "...; echo late >> file" &'`
    returned, `lanes` showed lane a idle, and the next `exec --lane a` ran while the `setsid`
    child still worked in the worktree. It carries the lease's id in its environment: the lane
    stays held, `lanes` names it, and the next command waits until it has exited."""
    ready, ready_fd = fifo("ready")
    gate, gate_fd = fifo("gate")
    inner = f"echo $$ > {ready}; read x < {gate}; echo late >> late.txt"
    done = cli("exec", "--lane", "a", "--", "sh", "-c", _setsid(inner))
    assert done.code == 0, done.err
    child = reap(int(_line(ready_fd)))
    lease = _last_exec()
    _store().run_pass()
    assert _lease(lease.seq).state is LeaseState.RUNNING

    report = json.loads(cli("lanes", "--json").out)
    lanes = {lane["lane"]: lane for lane in report["repos"][0]["lanes"]}
    (running,) = lanes["a"]["running"]
    assert running["seq"] == lease.seq
    assert {"pid": child, "command": f"sh -c {shlex.quote(inner)}"} in running["lingering"]
    text = cli("lanes").out
    assert f"running #{lease.seq} " in text and "(exited 0, " in text
    assert f"left running: pid {child} `sh -c {shlex.quote(inner)}`" in text

    waiter = spawn("exec", "--lane", "a", "--", sys.executable, AGENT)
    waiter.expect(rf"waiting for its lane: conflict with #{lease.seq} ", "err")
    with _exited(child):
        os.write(gate_fd, b"go\n")
    waiter.expect(r"^ready ")  # admitted once the child has gone, not before
    assert (board / ".worktrees" / "a" / "late.txt").read_text() == "late\n"
    released = _lease(lease.seq)
    assert (released.state, released.release_reason, released.exit_code) == (
        LeaseState.RELEASED,
        "exited",
        0,
    )
    waiter.send("exit 0")
    assert waiter.wait() == 0


def test_a_lease_id_of_another_ledger_or_lease_keeps_nothing(board: Path, spawn, reap) -> None:
    """The id is a lease of one ledger: a process carrying the same seq for another ledger (a
    second board, another test), or another seq of this one, does not hold the lane."""
    a = spawn("exec", "--lane", "a", "--", sys.executable, AGENT)
    line = a.expect(r"^ready ")
    seq = int(line.rsplit("lease=", 1)[1])
    ledger = os.path.realpath(default_path())
    decoys = [
        {"LANEBOARD_LEASE": str(seq), "LANEBOARD_LEDGER": ledger + ".elsewhere"},
        {"LANEBOARD_LEASE": f"{seq}0", "LANEBOARD_LEDGER": ledger},
        {"LANEBOARD_LEASE": str(seq)},
    ]
    for extra in decoys:  # started after the lease's command, as its own children would be
        decoy = subprocess.Popen(["sleep", "300"], env={**os.environ, **extra})
        reap(decoy.pid)
    a.send("exit 0")
    assert a.wait() == 0
    released = _lease(seq)
    assert (released.state, released.release_reason) == (LeaseState.RELEASED, "exited")


def test_stopping_exec_stops_what_left_its_session(board: Path, spawn, fifo, reap) -> None:
    """A signal `exec` passes on to its command's process group reaches the command's
    `setsid` children too: stopping a lease's command stops all of it."""
    ready, ready_fd = fifo("ready")
    script = _setsid(f"echo $$ > {ready}; exec sleep 300") + " echo started; read line"
    a = spawn("exec", "--lane", "a", "--", "sh", "-c", script)
    a.expect(r"^started$")
    child = reap(int(_line(ready_fd)))
    lease = _last_exec()
    with _exited(child):
        a.signal(signal.SIGTERM)
        assert a.wait() == 128 + signal.SIGTERM
    released = _lease(lease.seq)
    assert (released.state, released.release_reason) == (LeaseState.RELEASED, "exited")


def test_an_interrupted_setup_stops_its_setsid_children(repo: Path, cli, fifo, reap) -> None:
    """`new` stopped while its setup command runs (SIGTERM unwinds like Ctrl-C) stops the setup
    and what it started in a session of its own; the setup's lane is free again."""
    ready, ready_fd = fifo("ready")
    gate, _gate_fd = fifo("gate")
    setup = _setsid(f"echo $$ > {ready}; exec sleep 300") + f" read x < {gate}"
    (repo / ".laneboard.toml").write_text(
        UNCONFINED + f"[provision]\nsetup = {json.dumps(['sh', '-c', setup])}\n"
    )
    new = Spawned(["new", "s", "--no-start"], repo)
    try:
        child = reap(int(_line(ready_fd)))
        lease = next(x for x in _store().active() if x.kind.value == "setup")
        with _exited(child):
            new.signal(signal.SIGTERM)
            assert new.wait() != 0
    finally:
        new.close()
    assert _lease(lease.seq).state is LeaseState.RELEASED


def test_cancelling_an_orphaned_setup_stops_its_setsid_children(
    repo: Path, cli, fifo, reap
) -> None:
    """`new` killed while its setup runs: `cancel` takes the provisioning over and stops what
    the setup left running, in its session and out of it, before it removes the worktree."""
    ready, ready_fd = fifo("ready")
    gate, _gate_fd = fifo("gate")
    setup = _setsid(f"echo $$ > {ready}; exec sleep 300") + f" read x < {gate}"
    (repo / ".laneboard.toml").write_text(
        UNCONFINED + f"[provision]\nsetup = {json.dumps(['sh', '-c', setup])}\n"
    )
    new = Spawned(["new", "s", "--no-start"], repo)
    try:
        child = reap(int(_line(ready_fd)))
        lease = next(x for x in _store().active() if x.kind.value == "setup")
        new.signal(signal.SIGKILL)
        assert new.wait() == -signal.SIGKILL
    finally:
        new.close()
    _store().run_pass()
    assert _lease(lease.seq).state is LeaseState.RUNNING  # its setup and child still run
    with _exited(child):
        result = cli("cancel", "s")
        assert result.code == 0, result.err
    assert _lease(lease.seq).state is LeaseState.RELEASED
    assert not (repo / ".worktrees" / "s").exists()


def test_a_setsid_child_asking_for_its_own_lane_runs_under_the_lease_it_keeps(
    board: Path, cli, fifo
) -> None:
    """A child left running by a lane command (a watcher, a dev server) that later runs a
    command in that lane (a shim's `cargo`) keeps the lease itself: waiting for it would wait
    for itself forever. It runs under that lease instead."""
    gate, gate_fd = fifo("gate")
    said, said_fd = fifo("said")
    inner = (
        f"read x < {gate}; {LANEBOARD} exec --timeout 20 --lane a -- sh -c 'echo $LANEBOARD_LEASE'"
        f" > inner.txt; echo $? > {said}"
    )
    assert cli("exec", "--lane", "a", "--", "sh", "-c", _setsid(inner)).code == 0
    lease = _last_exec()
    os.write(gate_fd, b"go\n")
    assert _line(said_fd) == "0"
    assert (board / ".worktrees" / "a" / "inner.txt").read_text() == f"{lease.seq}\n"
    assert [x.seq for x in _store().admitted_in_order() if x.kind.value == "exec"][-1] == lease.seq


def test_a_child_waiting_for_its_lane_runs_once_it_is_what_keeps_the_lease(
    board: Path, spawn, fifo
) -> None:
    """A child that left the command's process tree asks for the lane while the command still
    runs: it waits (the command holds the lane). Once the command exits, the child is what keeps
    the lease, so it stops waiting and runs under it."""
    said, said_fd = fifo("said")
    inner = f"({LANEBOARD} exec --timeout 20 --lane a -- true; echo $? > {said}) &"
    a = spawn("exec", "--lane", "a", "--", "sh", "-c", _setsid(inner) + " echo started; read line")
    a.expect(r"^started$")
    lease = _last_exec()
    waiting = _eventually_waiting(lease)
    a.send("done")
    assert a.wait() == 0
    assert _line(said_fd) == "0"
    withdrawn = _lease(waiting.seq)
    assert (withdrawn.state, withdrawn.release_reason) == (
        LeaseState.RELEASED,
        f"runs under #{lease.seq}",
    )


def _eventually_waiting(behind: Lease) -> Lease:
    """The lease that waits for `behind` (the ledger is the only place that says so)."""
    import time

    end = time.monotonic() + DEADLINE
    while True:
        found = [
            x
            for x in _store().active()
            if x.state is LeaseState.WAITING
            and x.wait_reason is not None
            and x.wait_reason.lease == behind.seq
        ]
        if found:
            return found[0]
        assert time.monotonic() < end, f"nothing waited for #{behind.seq} within {DEADLINE}s"
        time.sleep(0.05)


def test_a_confined_setsid_child_ends_with_its_sandbox(repo: Path, cli, shared: Path) -> None:
    """Confined, the command and everything it starts (`setsid` children too) are one PID
    namespace, which ends with the command: its lease is released by `exec` itself, and nothing
    carrying the lease's id is left running."""
    assert cli("new", "a", "--no-start").code == 0
    done = cli("exec", "--lane", "a", "--", "sh", "-c", _setsid("sleep 300"))
    assert done.code == 0, done.err
    assert "unconfined" not in done.err
    lease = _last_exec()
    assert (lease.state, lease.release_reason) == (LeaseState.RELEASED, "exited")
    ledger = os.path.realpath(default_path())
    carrying = [
        found
        for found in procs.marked(MARKERS, since=lease.child_start or 0)
        if found.values.get("LANEBOARD_LEDGER") == ledger
    ]
    assert carrying == []
    assert cli("exec", "--lane", "a", "--timeout", "5", "--", "true").code == 0


def test_tmux_never_gets_a_lease_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tmux server started by laneboard from inside a lane command (a `laneboard new` run
    under a lease) would hand the lease's id to every pane it ever runs: every agent would keep
    that lane. laneboard's tmux calls leave it out."""
    from laneboard.sessions.tmux import TmuxRuntime

    monkeypatch.setenv("LANEBOARD_LEASE", "7")
    monkeypatch.setenv("LANEBOARD_LEDGER", str(tmp_path / "ledger.sqlite3"))
    runtime = TmuxRuntime(f"lb-lease-{os.getpid()}-{tmp_path.name}")
    try:
        runtime._cmd("new-session", "-d", "-s", "x")
        seen = runtime._run("show-environment", "-g")
        assert not [line for line in seen.stdout if line.startswith("LANEBOARD_L")]
    finally:
        runtime._run("kill-server")
