"""`laneboard exec` across real processes: admission order from the ledger, never wall time."""

from __future__ import annotations

import os
import select
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import pytest

from laneboard.core.adapters import procs
from laneboard.core.adapters.db import Database, default_path
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.domain.lanes import Lease, LeaseState
from tests.conftest import REPO_ROOT, run_cli
from tests.procs import DEADLINE, Spawned, exec_agent


@pytest.fixture
def board(repo: Path, cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repo with two provisioned tasks, `a` and `b`, and two slots."""
    monkeypatch.setenv("LANEBOARD_SLOTS", "2")
    for name in ("a", "b"):
        assert cli("new", name, "--no-start").code == 0
    return repo


@pytest.fixture
def spawn(board: Path) -> Iterator[Callable[..., Spawned]]:
    started: list[Spawned] = []

    def start(lane: str | None, *extra: str, env: dict[str, str] | None = None) -> Spawned:
        proc = exec_agent(lane, board, *extra, env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


def _store() -> LeaseStore:
    return LeaseStore(Database(default_path()), slots=2)


def _order() -> list[int]:
    """Seqs of `exec` leases in the order they were admitted (provisioning's own are left out)."""
    return [lease.seq for lease in _store().admitted_in_order() if lease.kind.value == "exec"]


def _lease(seq: int) -> Lease:
    return _store().get(seq)


def _seq_of(proc: Spawned) -> int:
    line = proc.expect(r"^ready ", "out")
    return int(line.rsplit("lease=", 1)[1])


def test_command_runs_in_the_worktree_and_returns_its_exit_code(board: Path, spawn) -> None:
    a = spawn("a")
    line = a.expect(r"^ready ")
    assert f"cwd={board / '.worktrees' / 'a'} " in line
    a.send("exit 7")
    assert a.wait() == 7
    seq = int(line.rsplit("lease=", 1)[1])
    lease = _lease(seq)
    assert lease.state is LeaseState.RELEASED
    assert lease.exit_code == 7
    assert lease.release_reason == "exited"


def test_root_lane_runs_at_the_root(board: Path, spawn) -> None:
    root = spawn(None)
    assert f"cwd={board} " in root.expect(r"^ready ")
    root.send("exit 0")
    assert root.wait() == 0


def test_sibling_lanes_overlap(board: Path, spawn) -> None:
    a = spawn("a")
    first = _seq_of(a)
    b = spawn("b")
    second = _seq_of(b)  # b started while a still runs
    assert _lease(first).state is LeaseState.RUNNING
    for proc in (a, b):
        proc.send("exit 0")
        assert proc.wait() == 0
    assert _order() == [first, second]


def test_same_lane_serializes(board: Path, spawn) -> None:
    a = spawn("a")
    first = _seq_of(a)
    again = spawn("a")
    again.expect(rf"waiting for its lane: conflict with #{first} ", "err")
    a.send("exit 0")
    assert a.wait() == 0
    second = _seq_of(again)
    again.send("exit 3")
    assert again.wait() == 3
    assert _order() == [first, second]
    released = _lease(first).released_at
    admitted = _lease(second).admitted_at
    assert released is not None and admitted is not None and admitted >= released


def test_root_lease_waits_for_worktree_leases_and_holds_back_later_ones(board: Path, spawn) -> None:
    a = spawn("a")
    first = _seq_of(a)
    root = spawn(None)
    root.expect(rf"waiting for the root lane: conflict with #{first} ", "err")
    late = spawn("b")  # lane b is free, but the waiting root lease came first
    late.expect(r"waiting for its lane: behind #\d+ ", "err")
    a.send("exit 0")
    assert a.wait() == 0
    root_seq = _seq_of(root)
    assert _lease(root_seq).state is LeaseState.RUNNING
    root.send("exit 0")
    assert root.wait() == 0
    late_seq = _seq_of(late)
    late.send("exit 0")
    assert late.wait() == 0
    assert _order() == [first, root_seq, late_seq]


def test_worktree_lease_waits_for_running_root_lease(board: Path, spawn) -> None:
    root = spawn(None)
    root_seq = _seq_of(root)
    a = spawn("a")
    a.expect(rf"waiting for its lane: conflict with #{root_seq} ", "err")
    root.send("exit 0")
    assert root.wait() == 0
    a_seq = _seq_of(a)
    a.send("exit 0")
    assert a.wait() == 0
    assert _order() == [root_seq, a_seq]


def test_one_slot_serializes_siblings(board: Path, spawn) -> None:
    a = spawn("a", env={"LANEBOARD_SLOTS": "1"})
    first = _seq_of(a)
    b = spawn("b", env={"LANEBOARD_SLOTS": "1"})
    b.expect(r"waiting for its lane: slot", "err")
    a.send("exit 0")
    assert a.wait() == 0
    second = _seq_of(b)
    b.send("exit 0")
    assert b.wait() == 0
    assert _order() == [first, second]


def test_lease_of_a_killed_holder_is_reaped(board: Path, spawn) -> None:
    a = spawn("a")
    first = _seq_of(a)
    waiting = spawn("a")
    waiting.expect(r"waiting for its lane", "err")
    command = _lease(first).child_pid
    assert command is not None
    a.kill_group()  # SIGKILL exec, then its command (in a session of its own): nobody releases
    os.killpg(command, signal.SIGKILL)
    second = _seq_of(waiting)
    assert _lease(first).release_reason == "holder died"
    waiting.send("exit 0")
    assert waiting.wait() == 0
    assert _order() == [first, second]


def test_lease_outlives_a_killed_holder_while_its_command_runs(board: Path, spawn) -> None:
    """Unconfined: the command outlives its killed holder and keeps the lane. (Confined, it
    dies with its holder: `test_a_confined_command_and_its_jobs_end_with_their_holder`.)"""
    (board / ".laneboard.toml").write_text('[confine]\nmode = "off"\n')  # see below
    a = spawn("a")
    first = _seq_of(a)
    waiting = spawn("a")
    waiting.expect(r"waiting for its lane", "err")
    a.signal(signal.SIGKILL)  # only laneboard dies; the agent it started keeps running
    assert a.wait() == -signal.SIGKILL
    _store().run_pass()
    assert _lease(first).state is LeaseState.RUNNING
    a.send("exit 0")  # the orphaned agent still reads the same stdin
    second = _seq_of(waiting)
    assert _lease(first).release_reason == "holder died"
    waiting.send("exit 0")
    assert waiting.wait() == 0
    assert _order() == [first, second]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_signals_are_forwarded_and_the_exit_code_comes_back(
    board: Path, spawn, signum: int
) -> None:
    a = spawn("a")
    seq = _seq_of(a)
    a.signal(signum)
    a.expect(rf"^got {signal.Signals(signum).name}$")
    assert a.wait() == 100 + signum
    assert _lease(seq).exit_code == 100 + signum


def test_command_killed_by_a_signal_exits_128_plus_n(board: Path, cli) -> None:
    result = cli("exec", "--lane", "a", "--", "sh", "-c", "kill -KILL $$")
    assert result.code == 128 + signal.SIGKILL


def test_timeout_gives_up_with_exit_75_and_cancels(board: Path, spawn, cli) -> None:
    a = spawn("a")
    first = _seq_of(a)
    result = cli("exec", "--lane", "a", "--timeout", "0.2", "--", "true")
    assert result.code == 75
    assert "gave up after 0.2s waiting for admission" in result.err
    assert f"conflict with #{first}" in result.err
    active = [lease.seq for lease in _store().active()]
    assert active == [first]
    a.send("exit 0")
    assert a.wait() == 0


def test_cancelling_a_waiting_root_lease_releases_those_it_held_back(board: Path, spawn) -> None:
    a = spawn("a")
    first = _seq_of(a)
    root = spawn(None)
    root.expect(r"waiting for the root lane", "err")
    late = spawn("b")
    late.expect(r"waiting for its lane: behind", "err")
    root.signal(signal.SIGTERM)
    assert root.wait() == 128 + signal.SIGTERM
    late_seq = _seq_of(late)  # admitted without waiting for a
    cancelled = [x for x in _store().admitted_in_order() if x.seq == late_seq]
    assert cancelled and _lease(first).state is LeaseState.RUNNING
    for proc in (a, late):
        proc.send("exit 0")
        assert proc.wait() == 0


def test_quiet_exec_says_nothing_while_waiting(board: Path, spawn, cli) -> None:
    a = spawn("a")
    _seq_of(a)
    result = cli("exec", "--lane", "a", "--quiet", "--timeout", "0.2", "--", "true")
    assert result.code == 75
    assert result.err.startswith("laneboard: gave up after")
    assert "laneboard: waiting for" not in result.err


def _marker_command(marker: Path) -> list[str]:
    return ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]


@pytest.mark.parametrize("forgery", ["symlinked-gitfile", "moved", "replaced-by-copy"])
def test_forged_lane_is_refused_and_nothing_runs(
    board: Path, cli, tmp_path: Path, forgery: str
) -> None:
    worktree = board / ".worktrees" / "a"
    if forgery == "symlinked-gitfile":
        real = tmp_path / "gitfile"
        (worktree / ".git").rename(real)
        (worktree / ".git").symlink_to(real)
    elif forgery == "moved":
        worktree.rename(board / ".worktrees" / "a-moved")
    else:
        import shutil

        shutil.copytree(worktree, tmp_path / "copy", symlinks=True)
        worktree.rename(tmp_path / "original")
        (tmp_path / "copy").rename(worktree)
    marker = tmp_path / "ran"
    result = cli("exec", "--lane", "a", *_marker_command(marker))
    assert result.code == 1
    assert result.err.startswith("laneboard: lane a rejected: ")
    assert not marker.exists()
    assert _order() == []  # never admitted, never run at the root instead


def test_new_waits_for_in_flight_root_work(board: Path, spawn) -> None:
    root = spawn(None)
    root_seq = _seq_of(root)
    new = Spawned(["new", "c", "--no-start"], board)
    try:
        new.expect(rf"waiting for the root lane: conflict with #{root_seq} ", "err")
        assert not (board / ".worktrees" / "c").exists()
        root.send("exit 0")
        assert root.wait() == 0
        assert new.wait() == 0
        assert (board / ".worktrees" / "c" / ".git").is_file()
    finally:
        new.close()
    admitted = _store().admitted_in_order()
    kinds = [(lease.kind.value, lease.lane) for lease in admitted]
    # The root exec ran first; c's provisioning (root lane: add, then unlock) only after it.
    first_exec = kinds.index(("exec", None))
    assert admitted[first_exec].seq == root_seq
    assert kinds[first_exec + 1 :] == [("provision", None), ("provision", None)]


def test_exec_usage_errors(board: Path, cli) -> None:
    assert cli("exec", "--lane", "a").code == 2
    assert cli("exec", "--", "true").code == 2
    assert cli("exec", "--lane", "a", "--root", "--", "true").code == 2
    missing = cli("exec", "--lane", "nope", "--", "true")
    assert missing.code == 1
    assert missing.err.strip() == f"laneboard: no live task named 'nope' in {board}"
    assert cli("exec", "--lane", "a", "--", "no-such-command-here").code == 127


def test_exec_outside_a_registered_repo_is_refused(tmp_path: Path, cli) -> None:
    from tests.conftest import make_repo

    other = make_repo(tmp_path / "other")
    result = cli("exec", "--root", "--", "true", cwd=other)
    assert result.code == 1
    assert "no registered repository" in result.err
    assert sorted(os.listdir(other)) == [".git", "README.md"]


def test_lanes_shows_running_and_waiting_leases(board: Path, spawn, cli) -> None:
    import json

    a = spawn("a")
    first = _seq_of(a)
    root = spawn(None)
    root.expect(r"waiting for the root lane", "err")
    report = json.loads(cli("lanes", "--json").out)
    assert (report["slots"], report["used"], report["free"]) == (2, 1, 1)
    lanes = {lane["lane"]: lane for lane in report["repos"][0]["lanes"]}
    assert list(lanes) == ["root", "integration", "a", "b"]
    running = lanes["a"]["running"][0]
    assert running["seq"] == first
    assert running["command"][-1].endswith("agent.py")
    assert running["child_pid"] is not None
    waiting = lanes["root"]["waiting"][0]
    reason = waiting["wait_reason"]
    assert (reason["kind"], reason["lease"]) == ("conflict", first)
    assert reason["command"][-1].endswith("agent.py") and reason["since"] > 0
    assert lanes["b"] == {
        "lane": "b",
        "task_id": lanes["b"]["task_id"],
        "running": [],
        "waiting": [],
    }
    text = cli("lanes").out
    assert "slots: 1 of 2 used, 1 free" in text
    assert f"running #{first} " in text
    assert "waiting #" in text and f"conflict with #{first}" in text
    for proc in (a, root):
        proc.send("exit 0")
    assert a.wait() == 0
    assert root.wait() == 0


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_root_request_inside_a_worktree_lease_is_refused_not_deadlocked(
    board: Path, cli, mode: str
) -> None:  # type: ignore[no-untyped-def]
    """Regression: a root-lane request from inside `exec --lane a` waited for its own lease.
    Confined, its sandbox refuses `--root` outright; unconfined, the lease says why."""
    (board / ".laneboard.toml").write_text(f'[confine]\nmode = "{mode}"\n')
    inner = [sys.executable, "-P", "-m", "laneboard", "exec", "--root", "--", "true"]
    result = cli("exec", "--lane", "a", "--", *inner)
    assert result.code == 1
    if mode == "off":
        assert "needs the root lane, but runs inside lease" in result.err
    else:
        assert "`exec --root` is not allowed from inside task a's sandbox" in result.err


def test_new_inside_a_worktree_lease_is_refused_before_anything_is_written(
    board: Path, cli
) -> None:
    inner = [sys.executable, "-P", "-m", "laneboard", "new", "c", "--no-start"]
    result = cli("exec", "--lane", "a", "--", *inner)
    assert result.code == 1
    assert "would wait for itself" in result.err
    assert "c" not in [
        t["name"] for t in __import__("json").loads(cli("ls", "--json", "--all").out)["tasks"]
    ]


def test_lease_env_of_an_unrelated_process_is_ignored(board: Path, spawn, cli) -> None:
    a = spawn("a")
    seq = _seq_of(a)
    # Not a descendant of lease #seq's command: the variable means nothing, the lane is busy.
    result = cli(
        "exec", "--lane", "a", "--timeout", "0.2", "--", "true", env={"LANEBOARD_LEASE": str(seq)}
    )
    assert result.code == 75
    a.send("exit 0")
    assert a.wait() == 0


def test_missing_command_with_a_path_exits_127(board: Path, cli) -> None:
    result = cli("exec", "--root", "--", "./no-such-thing")
    assert result.code == 127
    assert "No such file or directory" in result.err


def test_non_finite_timeout_is_a_usage_error(board: Path, cli) -> None:
    assert cli("exec", "--lane", "a", "--timeout", "nan", "--", "true").code == 2
    assert cli("exec", "--lane", "a", "--timeout", "inf", "--", "true").code == 2


def test_setup_lease_is_held_while_setup_runs_even_if_new_is_killed(
    repo: Path, cli, tmp_path: Path
) -> None:
    """Regression: setup ran with its lease but never recorded its command, so killing
    `laneboard new` released the lane while setup still ran in it. Unconfined: a confined
    setup dies with the `new` that runs it."""
    started, gate = tmp_path / "started", tmp_path / "gate"
    os.mkfifo(started)
    os.mkfifo(gate)
    (repo / ".laneboard.toml").write_text(
        '[confine]\nmode = "off"\n'
        f'[provision]\nsetup = ["sh", "-c", "echo up > {started}; read x < {gate}"]\n'
    )
    new = Spawned(["new", "s", "--no-start"], repo)
    try:
        with _reader(started) as ready:
            assert ready.readline() == "up\n"  # setup runs: its lease recorded it before exec
        setup = next(x for x in _store().active() if x.kind.value == "setup")
        assert setup.child_pid is not None
        new.signal(signal.SIGKILL)
        assert new.wait() == -signal.SIGKILL
        _store().run_pass()
        assert _lease(setup.seq).state is LeaseState.RUNNING  # setup still runs: lane held
        with _exited(setup.child_pid), open(gate, "w") as release:
            release.write("go\n")
        _store().run_pass()
        assert _lease(setup.seq).state is LeaseState.RELEASED
        assert _lease(setup.seq).release_reason == "holder died"
    finally:
        new.close()


@contextmanager
def _reader(fifo: Path) -> Iterator[TextIO]:
    """Open a FIFO for reading, failing the test (not hanging it) if no writer comes."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, f"nothing was written to {fifo} within {DEADLINE}s"
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd)) as handle:
            yield handle
    finally:
        os.close(fd)


@contextmanager
def _exited(pid: int) -> Iterator[None]:
    """Run the block, then wait (on a pidfd, not a sleep) until process `pid` has exited."""
    fd = os.pidfd_open(pid)
    try:
        yield
        ready, _, _ = select.select([fd], [], [], DEADLINE)
        assert ready, f"process {pid} still runs after {DEADLINE}s"
    finally:
        os.close(fd)


def test_a_background_child_keeps_the_lane_after_its_command_exits(board: Path, cli) -> None:
    """Was released at once: `exec --lane a -- sh -c 'long-job & exit 0'` gave the lane back
    while `long-job` still ran in it. A lease now lasts until the last process of the command's
    process group (here: its session, as it has no terminal) has exited. Unconfined: a
    confined command's sandbox is one PID namespace, and its jobs end with it
    (`test_a_confined_command_and_its_jobs_end_with_their_holder`)."""
    import json

    (board / ".laneboard.toml").write_text('[confine]\nmode = "off"\n')  # see below

    job = "sleep 300 >/dev/null 2>&1 & echo $!"  # not holding our pipe: the job is on its own
    result = cli("exec", "--lane", "a", "--", "sh", "-c", job)
    assert result.code == 0
    background = int(result.out.strip())
    lanes = {x["lane"]: x for x in json.loads(cli("lanes", "--json").out)["repos"][0]["lanes"]}
    (held,) = lanes["a"]["running"]
    assert held["command"] == ["sh", "-c", job]
    assert cli("exec", "--lane", "a", "--timeout", "0.2", "--", "true").code == 75
    assert cli("exec", "--lane", "b", "--", "true").code == 0  # siblings are not held back
    with _exited(background):
        os.kill(background, signal.SIGTERM)
    lease = _lease(held["seq"])
    _store().run_pass()
    lease = _lease(held["seq"])
    assert (lease.state, lease.release_reason, lease.exit_code) == (
        LeaseState.RELEASED,
        "exited",
        0,
    )
    assert cli("exec", "--lane", "a", "--", "true").code == 0


def test_a_lease_whose_command_and_children_are_gone_is_released_by_exec_itself(
    board: Path, cli
) -> None:
    result = cli("exec", "--lane", "a", "--", "sh", "-c", "sleep 0 & wait")
    assert result.code == 0
    last = [x for x in _store().admitted_in_order() if x.kind.value == "exec"][-1]
    assert (last.state, last.release_reason) == (LeaseState.RELEASED, "exited")


def test_discard_waits_for_in_flight_lane_commands_of_the_repo(board: Path, spawn) -> None:
    b = spawn("b")
    b_seq = _seq_of(b)
    discard = Spawned(["discard", "a"], board)
    try:
        discard.expect(rf"waiting for the root lane: conflict with #{b_seq} ", "err")
        assert (board / ".worktrees" / "a").is_dir()
        b.send("exit 0")
        assert b.wait() == 0
        assert discard.wait() == 0
        assert not (board / ".worktrees" / "a").exists()
    finally:
        discard.close()
    kinds = [(x.kind.value, x.seq) for x in _store().admitted_in_order()]
    assert kinds[-2:][0] == ("exec", b_seq)
    assert kinds[-1][0] == "remove"


def test_discard_refuses_at_once_while_its_own_lane_is_busy(board: Path, spawn, cli) -> None:
    a = spawn("a")
    seq = _seq_of(a)
    result = cli("discard", "a")
    assert result.code == 1
    assert f"  lease held: #{seq} " in result.err
    a.send("exit 0")
    assert a.wait() == 0


def test_a_lane_asked_for_two_commands_deep_is_the_outer_ones_and_runs_under_it(
    board: Path, cli
) -> None:  # type: ignore[no-untyped-def]
    """Was a deadlock: `exec --lane a` running `exec --lane b` running `exec --lane a` waited
    for its own grandparent's lease. Unconfined: a confined command asks for no lane but its
    own (`tests/e2e/test_confine_attacks.py`)."""
    (board / ".laneboard.toml").write_text('[confine]\nmode = "off"\n')  # see below
    import shlex
    import sys

    laneboard = f"PYTHONPATH={REPO_ROOT} {sys.executable} -P -m laneboard exec --timeout 20"
    inner = f"{laneboard} --lane a -- echo grandchild-ran"
    middle = f"{laneboard} --lane b -- sh -c {shlex.quote(inner)}"
    done = run_cli("exec", "--lane", "a", "--", "sh", "-c", middle, cwd=board)
    assert done.code == 0, done.err
    assert "grandchild-ran" in done.out


def test_a_confined_command_and_its_jobs_end_with_their_holder(board: Path, cli, spawn) -> None:  # type: ignore[no-untyped-def]
    """Confined, a lane command and everything it starts are one PID namespace: a background
    job ends with the command, and a killed `laneboard exec` takes its command with it
    (`--die-with-parent`); either way nothing is left running and the lane is free again.
    (Was flaky: the pass ran right after `exec` died, while the kernel was still ending the
    sandbox it took along; it waits for that now, without ending anything itself.)"""
    job = "sleep 300 & echo started"
    assert cli("exec", "--lane", "a", "--", "sh", "-c", job).code == 0
    assert cli("exec", "--lane", "a", "--timeout", "5", "--", "true").code == 0
    a = spawn("a")
    first = _seq_of(a)
    command = _lease(first)
    assert command.child_pid is not None
    a.signal(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    assert procs.wait_gone(command.child_pid, command.child_start, deadline=DEADLINE)
    _store().run_pass()
    assert _lease(first).state is LeaseState.RELEASED
    assert cli("exec", "--lane", "a", "--timeout", "5", "--", "true").code == 0
