"""Processes are named by pid and start time, so a reused pid is not taken for the original."""

from __future__ import annotations

import os
import subprocess

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
