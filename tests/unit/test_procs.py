"""Processes are named by pid and start time, so a reused pid is not taken for the original."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from laneboard.core.adapters import procs


def test_this_process_is_alive_with_its_start_time() -> None:
    pid, start = procs.me()
    assert procs.alive(pid, start)


def test_a_reused_pid_with_another_start_time_is_not_the_holder() -> None:
    pid, start = procs.me()
    assert not procs.alive(pid, start + 1)


def test_an_exited_process_is_not_alive() -> None:
    child = subprocess.Popen(["true"])
    start = procs.start_time(child.pid)
    child.wait()
    assert not procs.alive(child.pid, start)


def test_a_zombie_counts_as_exited() -> None:
    child = subprocess.Popen(["true"])
    start = procs.start_time(child.pid)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
    assert procs.start_time(child.pid) is None
    assert not procs.alive(child.pid, start)
    child.wait()


def _stat_line(pid: int, start: int) -> str:
    """A `/proc/<pid>/stat` line: state S, process group and session `pid`, started at `start`."""
    after = ["S", "1", str(pid), str(pid)] + ["0"] * 15 + [str(start)] + ["0"] * 10
    return f"{pid} (sh) {' '.join(after)}\n"


def _fake_process(proc: Path, pid: int, start: int, environ: bytes) -> None:
    (proc / str(pid)).mkdir(exist_ok=True)
    (proc / str(pid) / "stat").write_text(_stat_line(pid, start))
    (proc / str(pid) / "environ").write_bytes(environ)


def _execed(pid: int, cmdline: bytes) -> None:
    """Wait (generously: a loaded machine) until process `pid` runs `cmdline` and its exec is
    done: the kernel shows the new command line a moment before the new environment (in
    between, `environ` reads empty)."""
    import time

    end = time.monotonic() + 30
    while (
        Path(f"/proc/{pid}/cmdline").read_bytes() != cmdline
        or not Path(f"/proc/{pid}/environ").read_bytes()
    ):
        assert time.monotonic() < end, f"process {pid} never ran {cmdline!r}"
        time.sleep(0.01)


def test_a_variable_after_a_huge_environment_is_found_and_the_read_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    huge = {f"HUGE{n}": "x" * 100_000 for n in range(8)}  # 128 KiB at most per variable
    env = {**os.environ, **huge, "LB_TEST_MARK": "7,9"}
    child = subprocess.Popen(["sleep", "30"], env=env)
    try:
        _execed(child.pid, b"sleep\x0030\x00")  # before its exec it shows this process's
        assert procs.environ_of(child.pid, ["LB_TEST_MARK", "NOT_THERE"]) == {"LB_TEST_MARK": "7,9"}
        monkeypatch.setattr(procs, "ENVIRON_LIMIT", 4096)  # read no further than that
        assert procs.environ_of(child.pid, ["LB_TEST_MARK"]) == {}
    finally:
        child.kill()
        child.wait()
    assert procs.environ_of(child.pid, ["LB_TEST_MARK"]) is None  # gone: nothing to read


def test_an_environment_that_cannot_be_read_or_is_empty_is_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(procs, "PROC", str(tmp_path))
    (tmp_path / "10" / "environ").mkdir(parents=True)  # unreadable as a file
    _fake_process(tmp_path, 11, 1, b"")  # a kernel thread's, or one in the middle of an exec
    assert procs.environ_of(10, ["A"]) is None
    assert procs.environ_of(11, ["A"]) is None
    assert procs.environ_of(12, ["A"]) is None  # no such process


def test_marked_reads_only_processes_younger_than_asked_and_each_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(procs, "PROC", str(tmp_path))
    monkeypatch.setattr(procs, "_ENVIRONS", {})
    old = procs._ticks() - 10 * procs.SETTLE_TICKS
    _fake_process(tmp_path, 20, old, b"A=1\0LB_MARK=5\0")
    _fake_process(tmp_path, 21, old + 1, b"A=1\0")
    assert [m.pid for m in procs.marked(("LB_MARK",), since=old + 1)] == []  # 20 is older
    assert [(m.pid, m.values) for m in procs.marked(("LB_MARK",), since=old)] == [
        (20, {"LB_MARK": "5"})
    ]
    # Read once per (pid, start time): a program keeps the environment it started with.
    (tmp_path / "21" / "environ").write_bytes(b"LB_MARK=5\0")
    assert [m.pid for m in procs.marked(("LB_MARK",), since=old)] == [20]
    # The same pid started again is another process, read anew.
    _fake_process(tmp_path, 21, old + 2, b"LB_MARK=6\0")
    assert sorted(m.pid for m in procs.marked(("LB_MARK",), since=old)) == [20, 21]


def test_what_a_young_process_lacks_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between its fork and its exec a process shows its parent's environment, not the one it
    was given: a young process without the mark is looked at again next time."""
    monkeypatch.setattr(procs, "PROC", str(tmp_path))
    monkeypatch.setattr(procs, "_ENVIRONS", {})
    young = procs._ticks()
    _fake_process(tmp_path, 30, young, b"A=1\0")
    assert procs.marked(("LB_MARK",), since=0) == []
    (tmp_path / "30" / "environ").write_bytes(b"A=1\0LB_MARK=5\0")
    assert [m.pid for m in procs.marked(("LB_MARK",), since=0)] == [30]


def test_a_process_caught_in_its_exec_is_read_again_and_a_kernel_thread_never(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load, a lease's `setsid` child was read while it exec'd (its environment empty for
    that moment): it counted as carrying nothing and its lane was freed while it worked."""
    import threading

    monkeypatch.setattr(procs, "PROC", str(tmp_path))
    monkeypatch.setattr(procs, "_ENVIRONS", {})
    _fake_process(tmp_path, 21, 5, b"")  # in the middle of its exec
    _fake_process(tmp_path, 22, 5, b"")
    kernel = _stat_line(22, 5).split(" ")
    kernel[2 + 6] = str(procs.KERNEL_THREAD)  # its flags: a kernel thread (root's, no environ)
    (tmp_path / "22" / "stat").write_text(" ".join(kernel))
    read: list[int] = []
    environ_of = procs.environ_of
    monkeypatch.setattr(
        procs, "environ_of", lambda pid, names: read.append(pid) or environ_of(pid, names)
    )
    done = threading.Timer(
        0.2, lambda: (tmp_path / "21" / "environ").write_bytes(b"LB_TEST_MARK=1\0")
    )
    done.start()
    try:
        found = procs.marked(("LB_TEST_MARK",), since=0)
    finally:
        done.join()
    assert [(m.pid, m.values) for m in found] == [(21, {"LB_TEST_MARK": "1"})]
    assert 22 not in read


def test_this_processs_own_git_is_not_a_process_inside_but_any_other_process_is(
    tmp_path: Path,
) -> None:
    """Under load the board's own `git status` of a worktree was still running when its
    finalize removed that worktree: it was named as a process inside and the worktree kept."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    own = subprocess.Popen(["git", "cat-file", "--batch"], cwd=tmp_path, stdin=subprocess.PIPE)
    other = subprocess.Popen(["sleep", "30"], cwd=tmp_path)
    stray = subprocess.Popen(  # a git that is not this process's: it left our tree
        ["setsid", "-f", "git", "cat-file", "--batch"], cwd=tmp_path, stdin=subprocess.PIPE
    )
    try:
        stray.wait()
        _execed(other.pid, b"sleep\x0030\x00")
        found = []
        end = time.monotonic() + 30
        while (
            not any("(git)" in line for line in found) and time.monotonic() < end
        ):  # the stray's exec, on a loaded machine
            found = procs.inside(str(tmp_path))
            time.sleep(0.01)
        assert any(line.startswith(f"pid {other.pid} (sleep)") for line in found), found
        assert any("(git)" in line for line in found), found  # the stray
        assert own.poll() is None  # it runs, inside
        assert not any(line.startswith(f"pid {own.pid} ") for line in found)
    finally:
        for child in (own, other):
            child.kill()
            child.wait()
        assert stray.stdin is not None
        stray.stdin.close()
