"""`laneboard exec` in a real tmux pane (a private socket, libtmux's pytest plugin): the
terminal's keys reach the command, and killing the pane ends the command and frees its lane."""

from __future__ import annotations

import json
import os
import select
import shlex
import sys
from pathlib import Path

import pytest

from laneboard.core.adapters.db import Database, default_path
from laneboard.core.adapters.leases import LeaseStore
from laneboard.core.domain.lanes import LeaseState
from tests.conftest import DEADLINE, REPO_ROOT

pytestmark = pytest.mark.tmux

COMMAND = """
import os, signal, sys, time
def hung_up(signum, frame):
    open(sys.argv[2], "w").write("got SIGHUP\\n")
    sys.exit(129)
signal.signal(signal.SIGHUP, hung_up)
open(sys.argv[1], "w").write(f"ready {os.getpid()} tty={os.isatty(0)}\\n")
time.sleep(300)
"""


def _wait_readable(fd: int, what: str) -> None:
    ready, _, _ = select.select([fd], [], [], DEADLINE)
    assert ready, f"{what} did not happen within {DEADLINE}s"


def test_killing_the_pane_hangs_up_the_command_and_frees_the_lane(
    repo: Path, cli, server, shared: Path
) -> None:
    """Was left running: when the pane of `laneboard exec` was killed, the kernel hung up only
    laneboard; the command lived on with no terminal and the lane stayed held."""
    assert cli("new", "a", "--no-start").code == 0
    started, marker = shared / "started", shared / "hup"  # where the confined command sees them
    os.mkfifo(started)
    env = {
        key: os.environ[key]
        for key in ("HOME", "LANEBOARD_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")
    }
    laneboard = [sys.executable, "-P", "-m", "laneboard", "exec", "--lane", "a", "--"]
    argv = [
        "env",
        f"PYTHONPATH={REPO_ROOT}",
        *(f"{k}={v}" for k, v in env.items()),
        *laneboard,
        sys.executable,
        "-c",
        COMMAND,
        str(started),
        str(marker),
    ]
    session = server.new_session(session_name="lb", start_directory=str(repo))
    pane = session.active_window.split(
        attach=False, start_directory=str(repo), shell=shlex.join(argv)
    )
    fd = os.open(started, os.O_RDONLY | os.O_NONBLOCK)
    try:
        _wait_readable(fd, "the command's start")
        words = os.read(fd, 4096).decode().split()
    finally:
        os.close(fd)
    assert words[0] == "ready" and words[2] == "tty=True"  # it has the pane's terminal
    store = LeaseStore(Database(default_path()), slots=2)
    (lease,) = [x for x in store.admitted_in_order() if x.kind.value == "exec"]
    # The lease's command is bwrap (the lane runs confined, the command in bwrap's own PID
    # namespace, where it is not the pid it printed).
    assert lease.child_pid is not None
    assert Path(f"/proc/{lease.child_pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"bwrap")
    watched = [os.pidfd_open(pid) for pid in (lease.child_pid, lease.holder_pid)]
    try:
        pane.kill()
        for fd, what in zip(watched, ("the command", "laneboard exec"), strict=True):
            _wait_readable(fd, f"the exit of {what} after the pane was killed")
    finally:
        for fd in watched:
            os.close(fd)
    assert marker.read_text() == "got SIGHUP\n"
    store.run_pass()
    assert store.get(lease.seq).state is LeaseState.RELEASED
    report = json.loads(cli("lanes", "--json").out)
    assert all(not lane["running"] for lane in report["repos"][0]["lanes"])
